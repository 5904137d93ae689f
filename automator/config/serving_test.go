package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestServingOfALaterReleaseIsRead: serving.yaml is written by serve, never
// by hand, and a later release may record more in it; a command of this
// release reads what it knows rather than refusing the whole file (as
// exec of a release before db was recorded refused a serve's that had it).
func TestServingOfALaterReleaseIsRead(t *testing.T) {
	dir := t.TempDir()
	data := "grpc: 127.0.0.1:8443\nhttp: 127.0.0.1:8080\ndb: /var/lib/automator/automator.db\nsomething_later: 3\n"
	if err := os.WriteFile(filepath.Join(dir, FileServing), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	s, ok, err := ReadServing(dir)
	if err != nil || !ok {
		t.Fatalf("ReadServing: %v, found %v", err, ok)
	}
	want := Serving{GRPC: "127.0.0.1:8443", HTTP: "127.0.0.1:8080", DB: "/var/lib/automator/automator.db"}
	if s != want {
		t.Fatalf("ReadServing = %+v, want %+v", s, want)
	}
}

// TestServingRoundTrips: what WriteServing writes, ReadServing reads back
// the same, so RemoveServing recognises a serve's own file.
func TestServingRoundTrips(t *testing.T) {
	dir := t.TempDir()
	s := Serving{GRPC: "[::1]:1", HTTP: "127.0.0.1:2", Plaintext: true, DB: "postgres://u@h/db"}
	if err := WriteServing(dir, s); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadServing(dir)
	if err != nil || !ok || got != s {
		t.Fatalf("ReadServing = %+v, %v, %v; want %+v", got, ok, err, s)
	}
	if err := RemoveServing(dir, s); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadServing(dir); ok || err != nil {
		t.Fatalf("after RemoveServing: found %v, %v", ok, err)
	}
}

// TestWriteServingWritesNoFileALinkNames: a link at the name the file used
// to be written under first (serving.yaml.tmp), made by the owner of a
// service user's data directory, must not have a serve run as root
// truncate the file it names: WriteServing writes under a new name of its
// own, and leaves nothing else behind.
func TestWriteServingWritesNoFileALinkNames(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	const theirs = "root:x:0:0:someone else's file\n"
	if err := os.WriteFile(victim, []byte(theirs), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, FileServing+".tmp")); err != nil {
		t.Fatal(err)
	}
	s := Serving{GRPC: "127.0.0.1:8443", HTTP: "127.0.0.1:8080"}
	if err := WriteServing(dir, s); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != theirs {
		t.Errorf("the file the link names: %q, %v; want it untouched", got, err)
	}
	if got, ok, err := ReadServing(dir); err != nil || !ok || got != s {
		t.Errorf("ReadServing: %+v, %v, %v; want %+v", got, ok, err, s)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the directory holds %d entries, want the link and %s: %v", len(entries), FileServing, entries)
	}
}

// TestWriteServingRemovesTheLeftoversOfAnInterruptedWrite: a serve that
// stopped between writing its file under a name of its own and renaming it
// left that file behind; the next write removes such files once they are
// older than any write takes, and leaves a younger one, which may be
// another replica's about to be renamed.
func TestWriteServingRemovesTheLeftoversOfAnInterruptedWrite(t *testing.T) {
	dir := t.TempDir()
	old, young := filepath.Join(dir, "."+FileServing+".111"), filepath.Join(dir, "."+FileServing+".222")
	for _, path := range []string{old, young} {
		if err := os.WriteFile(path, []byte("grpc: 127.0.0.1:1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-staleServingAfter - time.Minute)
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}
	if err := WriteServing(dir, Serving{GRPC: "127.0.0.1:8443", HTTP: "127.0.0.1:8080"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"." + FileServing + ".222", FileServing}; !slices.Equal(names, want) {
		t.Errorf("the directory holds %q, want %q: the leftover of an hour ago removed, the younger one kept", names, want)
	}
}
