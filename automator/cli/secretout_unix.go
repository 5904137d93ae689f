//go:build !windows

package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

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
		fmt.Fprintf(stderr, "automator: warning: stdout is a file %s may read (mode %v), %s, and it receives %s; making it readable by its owner only failed (%v): chmod 600 it\n", who, fi.Mode(), fileName(f), what, errors.Unwrap(err))
		return
	}
	fmt.Fprintf(stderr, "automator: stdout is a file %s may read (mode %v), %s, and it receives %s: made it mode %v, readable by its owner only\n", who, fi.Mode(), fileName(f), what, fs.FileMode(mode))
}

// fileName is the path of the file f is open on, as the system names it
// (stdout's name is /dev/stdout), or "" when not known.
func fileName(f *os.File) string {
	if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err == nil && filepath.IsAbs(p) {
		return p
	}
	return f.Name()
}
