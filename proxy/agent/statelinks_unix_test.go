//go:build !windows

package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAStateDirsFilesAreNotFollowedElsewhere: a service's state_dir is its
// user's, and so every script the service runs may replace what is in it.
// A proxy run there as root (by hand, or by `proxy uninstall`, `start`,
// `status`) must not write its pid over the file a proxy.lock link names,
// nor over one hard-linked there, nor hang on a pipe put in the place of
// proxy.lock or status.json: each is refused, saying what it is, and the
// file elsewhere is left as it was.
func TestAStateDirsFilesAreNotFollowedElsewhere(t *testing.T) {
	t.Parallel()
	elsewhere := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(elsewhere, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kept := func(t *testing.T) {
		t.Helper()
		if data, err := os.ReadFile(elsewhere); err != nil || string(data) != "keep me\n" {
			t.Errorf("the file elsewhere holds %q (%v), want it as it was", data, err)
		}
	}
	for _, tc := range []struct {
		name, want string
		plant      func(path string) error
	}{
		{"a symbolic link", "symbolic link", func(path string) error { return os.Symlink(elsewhere, path) }},
		{"a hard link", "hard link", func(path string) error { return os.Link(elsewhere, path) }},
		{"a pipe", "not a regular file", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, name := range []string{LockFileName, StateFileName} {
				if err := tc.plant(filepath.Join(dir, name)); err != nil {
					t.Skipf("cannot make %s here: %v", tc.name, err)
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if l, err := LockStateDir(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
					l.Release()
					t.Errorf("LockStateDir with %s as its lock: %v, want it refused as %s", tc.name, err, tc.want)
				}
				if err := CheckStateDir(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("CheckStateDir with %s as its lock: %v, want it refused as %s", tc.name, err, tc.want)
				}
				if _, err := ReadState(filepath.Join(dir, StateFileName)); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("ReadState of %s: %v, want it refused as %s", tc.name, err, tc.want)
				}
			}()
			waittest.Recv(t, done, "the state_dir's files to be looked at without waiting on them")
			kept(t)
		})
	}
}

// TestASpoolThatIsALinkIsNotWrittenThrough: the spool's files are made,
// renamed, set aside and removed in it; a spool replaced by a link to
// another directory is not used: nothing is written there, nothing of it
// is removed or renamed, and the result is not taken for posted.
func TestASpoolThatIsALinkIsNotWrittenThrough(t *testing.T) {
	t.Parallel()
	state, elsewhere := t.TempDir(), t.TempDir()
	for name, data := range map[string]string{".tmp-keep": "a file of its own", "config.json": "{not a record"} {
		if err := os.WriteFile(filepath.Join(elsewhere, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(state, SpoolDirName)
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	s := newSpool(dir, slog.New(slog.DiscardHandler))
	inline := func(f func()) { f() }
	e := s.put("acme", time.Now().Add(time.Minute), &automatorv1.CompleteRequest{WorkId: "w-1", ClaimId: "c", InstanceId: "a"}, inline)
	if e.wait() {
		t.Error("a result was kept in a spool that is a link")
	}
	if due := s.load("a", time.Now()); len(due) != 0 {
		t.Errorf("load through a link found %d results", len(due))
	}
	entries, err := os.ReadDir(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != ".tmp-keep config.json" {
		t.Errorf("the directory the link names holds %q, want only its own .tmp-keep and config.json, untouched", got)
	}
	if err := CheckSpoolDir(state); err == nil {
		t.Error("CheckSpoolDir of a spool that is a link: nil, want it refused")
	}
}
