//go:build !windows

package sqlitestore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/nobodytest"
)

// readOnlyChildEnv, set, makes TestAShmFileLeftReadOnlyIsNamed open the
// database it names and print the error: the test run again as nobody.
const readOnlyChildEnv = "OPSGATE_TEST_OPEN_AS_NOBODY"

// TestAShmFileLeftReadOnlyIsNamed: a database made read only (mode 0444)
// opens, for the commands that only read (and a restore's reading of the
// database it replaces: a re-review), and says why it may not be written
// (Unwritable, which serve refuses), naming the file; the open leaves its
// -shm file with that mode, and once the database is writable again the
// -shm is what may not be written: Unwritable names it and what to do
// (every write said "attempt to write a readonly database", which names
// the database, writable now). As root (whom no mode stops) the opens run
// in a copy of this test run as nobody, who owns the files.
func TestAShmFileLeftReadOnlyIsNamed(t *testing.T) {
	if path := os.Getenv(readOnlyChildEnv); path != "" {
		s, err := Open(t.Context(), path)
		if err == nil {
			fmt.Printf("unwritable: %v\n", s.Unwritable())
			_, werr := s.AuditAppend(t.Context(), store.AuditEvent{At: time.Now(), Kind: store.AuditWorkEnded, Actor: "test"})
			fmt.Printf("write: %v\n", werr)
			s.Close()
		}
		fmt.Printf("open: %v\n", err)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give the files to nobody and open them as nobody")
	}
	t.Parallel()
	uid, gid := nobodytest.IDs(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(data, "automator.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{data, path} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	out := nobodytest.Run(t, dir, "TestAShmFileLeftReadOnlyIsNamed", readOnlyChildEnv+"="+path)
	// Refused as it opens, though nothing needs migrating (a review:
	// serve served it, every write failing).
	want := "unwritable: " + path + " is not writable by this user (mode -r--r--r--): give it to the automator's user, mode 0600: "
	if !strings.Contains(out, want) || !strings.Contains(out, "open: <nil>") {
		t.Errorf("the open of the read-only database said:\n%s\nwant it opened, for reading, and to say %q", out, want)
	}
	// A write says it too: it said only SQLite's "attempt to write a
	// readonly database" (a review).
	if want := "write: " + path + " is not writable by this user (mode -r--r--r--): "; !strings.Contains(out, want) {
		t.Errorf("a write to the read-only database said:\n%s\nwant %q", out, want)
	}
	if fi, err := os.Stat(path + "-shm"); err != nil || fi.Mode().Perm() != 0o444 {
		t.Fatalf("the open of the read-only database left no read-only -shm file: %v, %v", fi, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	out = nobodytest.Run(t, dir, "TestAShmFileLeftReadOnlyIsNamed", readOnlyChildEnv+"="+path)
	want = "unwritable: " + path + "-shm is not writable by this user (mode -r--r--r--): SQLite made it beside the database with the database's mode, when the database was read only; with serve stopped, remove it, or give it the database's owner and mode 0600: "
	if !strings.Contains(out, want) || !strings.Contains(out, "open: <nil>") {
		t.Errorf("the open with the -shm file left read only said:\n%s\nwant it to say %q", out, want)
	}
}
