//go:build !windows

package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadableByOthersSaysWhoBeyondTheOwnerMayRead: a file every user may
// read, or a group other than root's, is said so with its mode; one only
// its owner (or root's group) may read, and one that is not there, not.
func TestReadableByOthersSaysWhoBeyondTheOwnerMayRead(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "master.key")
	if err := os.WriteFile(path, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if who := ReadableByOthers(path); who != "" {
		t.Errorf("mode 0600: %q, want no one", who)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if who := ReadableByOthers(path); who != "every user (mode -rw-r--r--)" {
		t.Errorf("mode 0644: %q, want every user", who)
	}
	if who := ReadableByOthers(filepath.Join(t.TempDir(), "none")); who != "" {
		t.Errorf("a file that is not there: %q, want no one", who)
	}
	if os.Geteuid() != 0 {
		return // chown to another group needs root
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if who := ReadableByOthers(path); who != "" {
		t.Errorf("mode 0640, root's group: %q, want no one beyond the owner", who)
	}
	if err := os.Chown(path, -1, 65534); err != nil {
		t.Fatal(err)
	}
	if who := ReadableByOthers(path); !strings.HasPrefix(who, "group ") || !strings.HasSuffix(who, " (mode -rw-r-----)") {
		t.Errorf("mode 0640, group 65534: %q, want that group named", who)
	}
}
