//go:build !windows

package secretfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/nobodytest"
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

// readableChildEnv, set, makes TestAConfigReadThroughTheReadersOwnGroupIsNotExposed
// print ReadableByOthers of the files in the directory it names: the test
// run again as nobody.
const readableChildEnv = "OPSGATE_TEST_READABLE_AS_NOBODY"

// TestAConfigReadThroughTheReadersOwnGroupIsNotExposed: a file root owns,
// mode 0640, whose group is the reading process's own (a service's config
// as `proxy install --user` writes it, read by the service) is not said
// readable by others: chmod 600, as the warning said, would have left the
// service unable to read its config. The same file with another group,
// or owned by the reader with its group readable, still is.
func TestAConfigReadThroughTheReadersOwnGroupIsNotExposed(t *testing.T) {
	if dir := os.Getenv(readableChildEnv); dir != "" {
		for _, name := range []string{"service.yaml", "other-group.yaml", "own.yaml"} {
			fmt.Printf("%s: %q\n", name, ReadableByOthers(filepath.Join(dir, name)))
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give files to nobody's group and read them as nobody")
	}
	t.Parallel()
	uid, gid := nobodytest.IDs(t)
	dir := t.TempDir()
	for name, owner := range map[string][2]int{"service.yaml": {0, gid}, "other-group.yaml": {0, 1}, "own.yaml": {uid, gid}} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("token: t\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner[0], owner[1]); err != nil {
			t.Fatal(err)
		}
	}
	out := nobodytest.Run(t, dir, "TestAConfigReadThroughTheReadersOwnGroupIsNotExposed", readableChildEnv+"="+dir)
	for _, want := range []string{`service.yaml: ""`, `other-group.yaml: "group `, `own.yaml: "group `} {
		if !strings.Contains(out, want) {
			t.Errorf("ReadableByOthers as nobody:\n%s\nwant a line with %s", out, want)
		}
	}
}
