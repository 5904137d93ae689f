//go:build !windows

package cli

import (
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/opsgate/opsgate/internal/secretfile"
)

// restrictSecretFile makes f, stdout about to receive a secret (what),
// readable by its owner only when others may read it, and says so on
// stderr; when it cannot, it warns (a review: a profile saved with a
// shell's umask 022 was readable by every user, without a word).
func restrictSecretFile(f *os.File, fi fs.FileInfo, stderr io.Writer, what string) {
	who := secretfile.Others(fi, false)
	if who == "" {
		return
	}
	mode := fi.Mode().Perm() &^ 0o077
	if err := f.Chmod(mode); err != nil {
		fmt.Fprintf(stderr, "automator: warning: stdout is a file %s may read (mode %v), and %s is a secret; making it readable by its owner only failed: %v; chmod 600 it\n", who, fi.Mode(), what, err)
		return
	}
	fmt.Fprintf(stderr, "automator: stdout is a file %s could read (mode %v): made it mode %v, as %s is a secret\n", who, fi.Mode(), fs.FileMode(mode), what)
}
