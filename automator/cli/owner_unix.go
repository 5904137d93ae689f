//go:build !windows

package cli

import (
	"os"
	"syscall"
)

// keepOwner gives path the owner and group of old, the file it is about to
// replace, when they differ and this process may change them (root): a
// data directory chowned to the service's user (`automator install --user`)
// stays readable by it after a root-run command puts a new file in place.
// Nothing to do when old does not exist.
func keepOwner(path, old string) error {
	fi, err := os.Stat(old)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	return os.Lchown(path, int(st.Uid), int(st.Gid))
}
