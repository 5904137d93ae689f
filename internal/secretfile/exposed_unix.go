//go:build !windows

package secretfile

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// Restrict is what to do to a file ReadableByOthers names, RestrictDir
// to a directory WritableByOthers names.
const (
	Restrict    = "chmod 600 it"
	RestrictDir = "chmod 700 it"
	// RestrictInDir is Restrict for a file in a directory that may keep
	// others out.
	RestrictInDir = "unless its directory keeps them out, " + Restrict
)

// WritableByOthers says who beyond its owner (and root) may add, remove
// or replace what the directory at path holds: "every user (mode
// drwxrwxrwx)", "group staff (mode drwxrwx---)", or "" when no one else
// may, or it cannot be read.
func WritableByOthers(path string) string { return othersWithMode(path, true) }

// ReadableByOthers says who beyond its owner (and root) may read the file
// at path, which holds a secret: "every user (mode -rw-r--r--)", "group
// staff (mode -rw-r-----)", or "" when no one else may, or it cannot be
// read. Root's group is the owner's own here, and so is the group this
// process reads the file through (Others).
func ReadableByOthers(path string) string { return othersWithMode(path, false) }

// othersWithMode is Others of the file at path, with its mode.
func othersWithMode(path string, write bool) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if who := Others(fi, write); who != "" {
		return fmt.Sprintf("%s (mode %v)", who, fi.Mode())
	}
	return ""
}

// Others says who, beyond fi's owner and root's group, may read it (write
// false) or write it (write true), by its mode: "every user", "group
// NAME" (its id when it has no name), or "". A group this process reads
// the file through (its own group, on a file it does not own: a service's
// config that root owns, readable by the service's group, as `proxy
// install --user` writes it) is the reader's own too.
func Others(fi fs.FileInfo, write bool) string {
	other, group := fs.FileMode(0o004), fs.FileMode(0o040)
	if write {
		other, group = 0o002, 0o020
	}
	m := fi.Mode().Perm()
	switch {
	case m&other != 0:
		return "every user"
	case m&group != 0:
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Gid == 0 {
			return ""
		}
		if !write && int(st.Gid) == os.Getegid() && int(st.Uid) != os.Geteuid() {
			return ""
		}
		gid := strconv.FormatUint(uint64(st.Gid), 10)
		if g, err := user.LookupGroupId(gid); err == nil {
			return "group " + g.Name
		}
		return "group " + gid
	}
	return ""
}
