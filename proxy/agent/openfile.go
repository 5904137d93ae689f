package agent

import (
	"io/fs"
	"os"

	"github.com/opsgate/opsgate/internal/filelock"
)

// openStateFile opens a file of the state_dir (the lock, the status file)
// as it is there (filelock.OpenRegular): the directory may be a service
// user's, and so may be written by every script the service runs, and a
// proxy run as root on it (by hand, or by `proxy uninstall`, `start`,
// `status`) must not be made to write root's pid over a file a link
// names, nor to hang on a pipe.
func openStateFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	return filelock.OpenRegular(path, flag, perm, "the proxy's state_dir")
}
