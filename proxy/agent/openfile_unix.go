//go:build !windows

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openStateFile opens a file of the state_dir (the lock, the status file)
// as it is there: never through a symbolic link (O_NOFOLLOW), never
// waiting on a pipe (O_NONBLOCK), and only when it is a regular file of
// one name (not a hard link to a file elsewhere). The directory may be a
// service user's, and so may be written by every script the service runs:
// a proxy run as root on it (by hand, or by `proxy uninstall`, `start`,
// `status`) must not be made to write root's pid over a file a link names,
// nor to hang on a pipe.
func openStateFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link, which the proxy does not follow in its state_dir: remove it", path)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("%s is not a regular file (%s), which the proxy does not open in its state_dir: remove it", path, fi.Mode().Type())
	case ok && st.Nlink > 1:
		err = fmt.Errorf("%s has %d names (a hard link), which the proxy does not open in its state_dir: remove it", path, st.Nlink)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
