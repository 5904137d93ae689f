package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// openStateFile opens a file of the state_dir, only when it is a regular
// file: not a symbolic link nor a junction, which windows has no flag to
// refuse as the file is opened, so it is looked at first.
func openStateFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s), which the proxy does not open in its state_dir: remove it", path, fi.Mode().Type())
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return os.OpenFile(path, flag, perm)
}
