package config

import (
	"os"
	"path/filepath"
	"testing"
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
