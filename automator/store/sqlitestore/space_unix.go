//go:build unix

package sqlitestore

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// freeSpace returns the bytes of dir's file system available to this
// process (root may use the blocks reserved for it); ok is false when it
// cannot tell.
func freeSpace(dir string) (free uint64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	blocks := uint64(st.Bavail)
	if unix.Geteuid() == 0 {
		blocks = uint64(st.Bfree)
	}
	return blocks * uint64(st.Bsize), true
}

// ownedByMe reports whether this process's user owns the file fi describes.
func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
