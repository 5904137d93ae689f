//go:build !windows

package secretfile

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// ReadableByOthers says who beyond its owner (and root) may read the file
// at path, which holds a secret: "every user (mode -rw-r--r--)", "group
// staff (mode -rw-r-----)", or "" when no one else may, or it cannot be
// read. Root's group is the owner's own here.
func ReadableByOthers(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	m := fi.Mode()
	switch {
	case m.Perm()&0o004 != 0:
		return fmt.Sprintf("every user (mode %v)", m)
	case m.Perm()&0o040 != 0:
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Gid == 0 {
			return ""
		}
		gid := strconv.FormatUint(uint64(st.Gid), 10)
		name := gid
		if g, err := user.LookupGroupId(gid); err == nil {
			name = g.Name
		}
		return fmt.Sprintf("group %s (mode %v)", name, m)
	}
	return ""
}
