//go:build !windows

package runner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/pidtest"
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
	t.Parallel()
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout command")
	}
	spec := newSpec(t, groupLeaverScript)
	pids := t.TempDir()
	spec.Args = []string{pids}
	cancel := runCancellable(t, spec)
	readPid(t, filepath.Join(pids, "script.pid"))
	child := readPid(t, filepath.Join(pids, "child.pid"))
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	cancel()
	waitFor(t, "the script's grandchild "+strconv.Itoa(child)+" (under timeout(1)) to be gone after the unit was cancelled",
		func() bool { return pidtest.Gone(child) }, 3*time.Second)
}

// TestDeadlineKillsDescendantsInAGroupOfTheirOwn: the same at the
// deadline.
func TestDeadlineKillsDescendantsInAGroupOfTheirOwn(t *testing.T) {
	t.Parallel()
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
	waitFor(t, "the script's grandchild "+strconv.Itoa(child)+" (under timeout(1)) to be gone after the deadline",
		func() bool { return pidtest.Gone(child) }, 3*time.Second)
}

// TestNormalExitKillsEveryLeftoverOfTheSession: a unit's result is its
// script's exit, and nothing of the unit runs past it. A background child
// the script leaves behind is killed when the script exits, and Run reports
// at once (it does not wait out waitDelay for the child to close the output
// pipes): whether the child stays in the script's process group or, under
// timeout(1), makes a group of its own, and whether it holds the script's
// output or sent it elsewhere. (A child that leaves the session, setsid,
// is out of reach once the script has exited: TestEscapedChildCannotHangRun;
// while it runs, a deadline or cancel finds it through its parents:
// TestDeadlineKillsADescendantThatLeftTheSession.)
func TestNormalExitKillsEveryLeftoverOfTheSession(t *testing.T) {
	// Not parallel: it asserts how long Run took, which the load of the
	// other tests could stretch.
	checkNormalExitKillsEveryLeftover(t)
}

func checkNormalExitKillsEveryLeftover(t *testing.T) {
	const child = `sh -c 'echo $$ > "$1/child.pid.tmp"; mv "$1/child.pid.tmp" "$1/child.pid"; exec sleep 60' sh "$1"`
	for name, tc := range map[string]struct {
		start   string
		ownPgrp bool
	}{
		"in the group, holding the output":        {start: child + " &"},
		"in the group, output sent elsewhere":     {start: child + " >/dev/null 2>&1 &"},
		"own group (timeout), holding the output": {start: "timeout 60 " + child + " &", ownPgrp: true},
		"own group (timeout), output elsewhere":   {start: "timeout 60 " + child + " >/dev/null 2>&1 &", ownPgrp: true},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.ownPgrp {
				if runtime.GOOS != "linux" {
					t.Skip("a group of its own is found through /proc (linux)")
				}
				if _, err := exec.LookPath("timeout"); err != nil {
					t.Skip("no timeout command")
				}
			}
			spec := newSpec(t, tc.start+`
while [ ! -e "$1/child.pid" ]; do sleep 0.01; done
echo bye
`)
			pids := t.TempDir()
			spec.Args = []string{pids}
			start := time.Now()
			res := run(t, spec)
			took := time.Since(start)
			pid := readPid(t, filepath.Join(pids, "child.pid"))
			t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			if res.ExitCode != 0 || string(res.Stdout) != "bye\n" {
				t.Errorf("exit %d stdout %q, want 0 and bye", res.ExitCode, res.Stdout)
			}
			if took >= waitDelay {
				t.Errorf("Run took %v: it waited for the leftover child to close the output instead of killing it", took)
			}
			waitFor(t, "the leftover child "+strconv.Itoa(pid)+" to be gone", func() bool { return pidtest.Gone(pid) }, 5*time.Second)
		})
	}
}

// sessionLeaverScript starts a child that leaves the script's session
// (setsid, which does not fork here: a background job of a shell without
// job control leads no group), and waits while it runs: the child stays
// the script's, a part of its process tree, in no group or session of
// the script's.
const sessionLeaverScript = `
setsid sh -c 'echo $$ > "$1/child.pid.tmp"; mv "$1/child.pid.tmp" "$1/child.pid"; exec sleep 60' sh "$1" &
while [ ! -e "$1/child.pid" ]; do sleep 0.01; done
echo started
wait
`

// TestCancelKillsADescendantThatLeftTheSession: guarantee 7 and cancel
// kill the script's whole process tree, so a child that left the
// script's session with setsid, while still the script's child, is
// killed with it.
func TestCancelKillsADescendantThatLeftTheSession(t *testing.T) {
	t.Parallel()
	checkStopKillsADescendantThatLeftTheSession(t, false)
}

// TestDeadlineKillsADescendantThatLeftTheSession: the same at the
// deadline.
func TestDeadlineKillsADescendantThatLeftTheSession(t *testing.T) {
	t.Parallel()
	checkStopKillsADescendantThatLeftTheSession(t, true)
}

func checkStopKillsADescendantThatLeftTheSession(t *testing.T, atDeadline bool) {
	if runtime.GOOS != "linux" {
		t.Skip("a process tree is followed through /proc (linux)")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid command")
	}
	spec := newSpec(t, sessionLeaverScript)
	pids := t.TempDir()
	spec.Args = []string{pids}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := ErrCancelled
	if atDeadline {
		spec.Deadline = time.Now().Add(2 * time.Second)
		want = ErrDeadline
	} else {
		// Cancelled once the child has left the session (or after 30 s, when
		// readPid below says it never did).
		go func() {
			defer cancel()
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(pids, "child.pid")); err == nil {
					return
				}
			}
		}()
	}
	if _, err := Run(ctx, spec); !errors.Is(err, want) {
		t.Fatalf("Run = %v, want %v", err, want)
	}
	child := readPid(t, filepath.Join(pids, "child.pid"))
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	waitFor(t, "the script's child "+strconv.Itoa(child)+", which left its session, to be gone", func() bool { return pidtest.Gone(child) }, 3*time.Second)
}
