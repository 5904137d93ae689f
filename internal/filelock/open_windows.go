package filelock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// OpenRegular opens the file at path only when it is a regular file: not
// a symbolic link nor a junction, which Windows has no flag to refuse as
// the file is opened, so it is looked at first. in names the place for
// the errors ("its state_dir").
func OpenRegular(path string, flag int, perm fs.FileMode, in string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s), which is not opened in %s: remove it", path, fi.Mode().Type(), in)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return os.OpenFile(path, flag, perm)
}
