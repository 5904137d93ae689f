//go:build !windows

package filelock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestALockFileThatIsNotARegularFileIsNotOpened: a lock file lies in a
// data directory that may be a service user's, who could put a link
// there: a command run as root would create the file it names (an empty
// /etc/nologin locks every other user out), or lock another one. A link,
// a hard link and a pipe are refused, named, and nothing is made where
// the link points.
func TestALockFileThatIsNotARegularFileIsNotOpened(t *testing.T) {
	elsewhere := t.TempDir()
	existing := filepath.Join(elsewhere, "existing")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"a symbolic link to nothing", "symbolic link", func(path string) error { return os.Symlink(filepath.Join(elsewhere, "nologin"), path) }},
		{"a hard link", "hard link", func(path string) error { return os.Link(existing, path) }},
		{"a pipe", "not a regular file", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
	} {
		for what, take := range map[string]func(string) (*Lock, error){"Shared": Shared, "Exclusive": Exclusive} {
			path := filepath.Join(t.TempDir(), "serve.lock")
			if err := c.make(path); err != nil {
				t.Fatal(err)
			}
			l, err := take(path)
			if err == nil {
				l.Release()
			}
			if err == nil || errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s on %s: %v; want it refused as %s, naming it", what, c.name, err, c.want)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, "nologin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a lock taken through a link made the file it names: %v", err)
	}
}
