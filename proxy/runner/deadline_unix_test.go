//go:build !windows

package runner

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestPastDeadlineTriesToStartNothing: with the deadline passed, Run does
// not even try to start the script. The script's interpreter does not
// exist, so any start would fail with ErrStart; a script that ran could
// also be killed before it left a trace.
func TestPastDeadlineTriesToStartNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := writeFileNoFork(filepath.Join(dir, "s.sh"), []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := Spec{ScriptsDir: dir, Script: "s.sh", Deadline: time.Now().Add(-time.Second)}
	_, err := Run(context.Background(), spec)
	if !errors.Is(err, ErrDeadline) || errors.Is(err, ErrStart) {
		t.Fatalf("Run past the deadline = %v, want ErrDeadline without an attempt to start", err)
	}
}

// TestCancelledContextTriesToStartNothing: with ctx done already, Run does
// not even try to start the script (see TestPastDeadlineTriesToStartNothing).
func TestCancelledContextTriesToStartNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := writeFileNoFork(filepath.Join(dir, "s.sh"), []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Spec{ScriptsDir: dir, Script: "s.sh", Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, ErrCancelled) || errors.Is(err, ErrStart) {
		t.Fatalf("Run with a cancelled context = %v, want ErrCancelled without an attempt to start", err)
	}
}
