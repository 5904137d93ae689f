//go:build !windows

package agent

import (
	"os"
	"syscall"
)

// ownLike gives path the owner and group of dir when this process runs as
// root and dir is another user's: a proxy run by hand as root on the
// state_dir of a service installed with --user leaves only files that the
// service's user can still open (the lock above all: a 0600 root-owned
// proxy.lock would keep the service from ever starting again). Nothing to
// do otherwise: the files are this process's user's, as the directory is.
func ownLike(path, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	return os.Lchown(path, int(st.Uid), int(st.Gid))
}
