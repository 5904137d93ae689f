//go:build !windows

package cli

import (
	"os"
	"syscall"
)

// ownedHere tells whether the file fi is owned by this process's user: a
// backup removes the leftovers of its own user's backups only, not another
// user's in a shared directory (a review: run as root in /tmp).
func ownedHere(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
