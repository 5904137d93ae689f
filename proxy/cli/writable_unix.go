//go:build !windows

package cli

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/opsgate/opsgate/internal/secretfile"
)

// looseScriptsWarning is what the proxy logs at start, and status says,
// when writableByOthers lists anything.
const looseScriptsWarning = "users other than the scripts' owners may change what this proxy runs, as its user: keep scripts_dir, the directories above it, its scripts and the interpreters their #! lines name writable by their owner (root) only"

// writableByOthers lists what lets users other than the scripts' owners
// choose the programs that the scripts directory dir runs (as the proxy's
// user, often root): a path of scriptPaths that every user may write to,
// or a group other than root's, or that a user other than root and the
// proxy's own owns. A directory above dir or inside it with
// the sticky bit (/var/tmp, say) is not listed: there no one may rename or
// replace what is not theirs. Each entry names the path, who may write it
// and its mode. Empty when dir cannot be read.
func writableByOthers(dir string) []string { return writableByOthersThan(dir, os.Geteuid()) }

// writableByOthersAs is writableByOthers for `proxy status`, run by the
// operator rather than as the proxy: the proxy's user is taken to be the
// owner of stateDir, which `proxy install --user` gives the service's
// user, or this process's when there is none.
func writableByOthersAs(dir, stateDir string) []string {
	uid := os.Geteuid()
	if fi, err := os.Stat(stateDir); stateDir != "" && err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid = int(st.Uid)
		}
	}
	return writableByOthersThan(dir, uid)
}

// writableByOthersThan is writableByOthers, uid being the proxy's user.
func writableByOthersThan(dir string, uid int) []string {
	var found []string
	for _, p := range scriptPaths(dir) {
		fi, err := os.Stat(p.path)
		if err != nil {
			continue
		}
		other := p.kind == aboveScriptsDir || p.kind == insideScriptsDir
		if w := writers(fi, other); w != "" {
			found = append(found, fmt.Sprintf("%s: writable by %s (mode %v)", p.path, w, fi.Mode()))
		}
		if o := otherOwner(fi, uid); o != "" {
			found = append(found, fmt.Sprintf("%s: owned by %s, not root or this proxy's user (mode %v)", p.path, o, fi.Mode()))
		}
	}
	return found
}

// otherOwner names fi's owner, "user NAME" (its id when it has no name),
// when that is neither root nor the proxy's user, uid: whoever owns a
// script, the scripts directory or a directory above it may change what
// the proxy runs, its mode whatever it is (an owner may chmod; the sticky
// bit keeps no one from what they own). "" for root or the proxy's user.
func otherOwner(fi fs.FileInfo, uid int) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 || int(st.Uid) == uid {
		return ""
	}
	return "user " + userName(st.Uid)
}

// userName is the name of user uid, or its id when it has none.
func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username
	}
	return id
}

// writers says who, beyond its owner and root, may write fi ("" for no
// one): every user, or a group other than root's. other says fi is a
// directory other than the scripts directory (above it, or inside it
// holding a script), where the sticky bit keeps others from renaming what
// is not theirs.
func writers(fi fs.FileInfo, other bool) string {
	if other && fi.Mode()&fs.ModeSticky != 0 {
		return ""
	}
	return secretfile.Others(fi, true)
}

// unreadable says, of a script this process may run, why it may not read
// it ("mode -rwx--x--x, owner user deploy"), or "" when it may: the
// interpreter of a #! script, run as this process's user, must read it
// (a compiled program need not, so what it is cannot be told). A file no
// one may read (mode 0111) is taken for a program made execute-only on
// purpose, and not said (a re-review: /bin/true so, which runs, was).
func unreadable(path string) string {
	const readOK = 4 // R_OK
	if syscall.Access(path, readOK) == nil {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o444 == 0 {
		return ""
	}
	owner := ""
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = ", owner " + userName(st.Uid)
		if u := strconv.FormatUint(uint64(st.Uid), 10); owner == ", owner "+u {
			owner = ", owner uid " + u // no name
		}
	}
	return fmt.Sprintf("mode %v%s", fi.Mode().Perm(), owner)
}
