//go:build !windows

package filelock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// OpenRegular opens the file at path as it is there: never through a
// symbolic link (O_NOFOLLOW), never waiting on a pipe (O_NONBLOCK), and
// only when it is a regular file of one name (not a hard link to a file
// elsewhere). in names the place for the errors ("its state_dir"). For a
// directory another user may write (a service user's), where a process
// run as root must not be made to create, truncate or lock a file a link
// names, nor hang on a pipe.
func OpenRegular(path string, flag int, perm fs.FileMode, in string) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link, which is not followed in %s: remove it", path, in)
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
		err = fmt.Errorf("%s is not a regular file (%s), which is not opened in %s: remove it", path, fi.Mode().Type(), in)
	case ok && st.Nlink > 1:
		err = fmt.Errorf("%s has %d names (a hard link), which is not opened in %s: remove it", path, st.Nlink, in)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
