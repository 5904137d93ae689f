//go:build !windows

package runner

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// groupLeaverScript runs a child under timeout(1), which puts itself (and
// so the child) in a process group of its own, as GNU timeout does unless
// given --foreground, and as a shell with job control (set -m) does for
// each background job. Neither leaves the script's session.
const groupLeaverScript = `
timeout 60 sh -c 'echo $$ > "$1/child.pid"; exec sleep 60' sh "$1" &
echo $$ > "$1/script.pid"
wait
`

// TestCancelKillsDescendantsInAGroupOfTheirOwn: a command wrapped in
// timeout(1), a common idiom in scripts, is a descendant of the script, so
// cancelling the unit (or reaching its deadline) must kill it too
// (guarantee 7: the whole process tree).
func TestCancelKillsDescendantsInAGroupOfTheirOwn(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout command")
	}
	spec := newSpec(t, groupLeaverScript)
	pids := t.TempDir()
	spec.Args = []string{pids}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := Run(ctx, spec)
		errc <- err
	}()
	readPid(t, filepath.Join(pids, "script.pid"))
	child := readPid(t, filepath.Join(pids, "child.pid"))
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrCancelled) {
			t.Fatalf("Run = %v, want ErrCancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	deadline := time.Now().Add(3 * time.Second)
	for !processGone(child) {
		if time.Now().After(deadline) {
			t.Fatalf("the script's grandchild %d (under timeout(1)) still runs after the unit was cancelled", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeadlineKillsDescendantsInAGroupOfTheirOwn: the same at the
// deadline.
func TestDeadlineKillsDescendantsInAGroupOfTheirOwn(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout command")
	}
	spec := newSpec(t, groupLeaverScript)
	pids := t.TempDir()
	spec.Args = []string{pids}
	spec.Deadline = time.Now().Add(time.Second)
	if _, err := Run(context.Background(), spec); !errors.Is(err, ErrDeadline) {
		t.Fatalf("Run = %v, want ErrDeadline", err)
	}
	child := readPid(t, filepath.Join(pids, "child.pid"))
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	deadline := time.Now().Add(3 * time.Second)
	for !processGone(child) {
		if time.Now().After(deadline) {
			t.Fatalf("the script's grandchild %d (under timeout(1)) still runs after the deadline", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
