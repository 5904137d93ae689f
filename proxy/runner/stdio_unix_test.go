//go:build !windows

package runner

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// pipeWithWriter is a stdio whose copies are running, with a duplicate of
// its stdout pipe's write end, standing for a writer the runner does not
// control.
func pipeWithWriter(t *testing.T) (*stdio, *os.File) {
	t.Helper()
	s, err := attachStdio(&exec.Cmd{}, nil, DefaultMaxOutput)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(s.childEnds[0].Fd()))
	if err != nil {
		t.Fatal(err)
	}
	w := os.NewFile(uintptr(fd), "stdout writer")
	t.Cleanup(func() { w.Close() })
	s.started()
	return s, w
}

// TestAStallWhileWaitingForTheCopiesKeepsTheOutput: when the process is
// stopped while finish waits (SIGSTOP, a suspended VM), the delay has
// passed on resume while the copies have not run yet. Waiting in ticks
// counts that as one tick, so output still in the pipe is read. (Before,
// one timer of the whole delay expired, and the pipes could be closed under
// the output: the likely cause of an echo's output lost in a chaos run.)
func TestAStallWhileWaitingForTheCopiesKeepsTheOutput(t *testing.T) {
	t.Parallel()
	s, w := pipeWithWriter(t)
	ticks := make(chan time.Time, 1)
	ticks <- time.Now() // the one tick a stop of the whole process leaves
	done := make(chan struct{})
	go func() {
		s.await(ticks, finishSteps)
		close(done)
	}()
	if _, err := w.WriteString("the output\n"); err != nil {
		t.Fatalf("writing the output: %v", err)
	}
	w.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("finish did not return after the output ended")
	}
	if got := string(s.stdout.buf); got != "the output\n" {
		t.Errorf("stdout = %q, want %q", got, "the output\n")
	}
}

// TestFinishCutsOffAWriterThatNeverCloses: a process that escaped the tree
// and keeps the pipe open holds finish for its steps, and no more.
func TestFinishCutsOffAWriterThatNeverCloses(t *testing.T) {
	t.Parallel()
	s, _ := pipeWithWriter(t)
	ticks := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		s.await(ticks, finishSteps)
		close(done)
	}()
	for i := range finishSteps {
		select {
		case ticks <- time.Now():
		case <-done:
			t.Fatalf("finish returned after %d of its %d steps, with the writer still open", i, finishSteps)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("finish kept waiting after its steps")
	}
}

// TestACopyNotRunByTheEndOfTheDelayStillGetsTheOutputOfAPipeNobodyHolds:
// when finish's delay is over, a copy that has not run yet (a proxy
// running many scripts on few cores leaves a goroutine unscheduled for
// seconds now and then) still reads what the script wrote, as nothing
// holds the pipe's other end: only a pipe some process still holds is cut
// off. Here the stdout copy starts only once the delay is over; its pipe
// was closed under it, and a script's "ok" came back as "".
func TestACopyNotRunByTheEndOfTheDelayStillGetsTheOutputOfAPipeNobodyHolds(t *testing.T) {
	t.Parallel()
	s, err := attachStdio(&exec.Cmd{}, nil, DefaultMaxOutput)
	if err != nil {
		t.Fatal(err)
	}
	for i, out := range []string{"ok\n", "err\n"} {
		if _, err := s.childEnds[i].WriteString(out); err != nil {
			t.Fatal(err)
		}
	}
	s.closeChildEnds() // the script exited: nothing holds the write ends
	// started, with the stdout copy held back until the delay is over.
	s.running = true
	s.copied = make(chan struct{})
	s.copies.Store(2)
	go s.drain(&s.stderr, s.errR)
	s.cutOff = func() { go s.drain(&s.stdout, s.outR) }
	ticks := make(chan time.Time, finishSteps)
	for range finishSteps {
		ticks <- time.Now()
	}
	done := make(chan struct{})
	go func() {
		s.await(ticks, finishSteps)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("finish did not return after the copies ended")
	}
	if got := string(s.stdout.buf); got != "ok\n" {
		t.Errorf("stdout = %q, want %q", got, "ok\n")
	}
	if got := string(s.stderr.buf); got != "err\n" {
		t.Errorf("stderr = %q, want %q", got, "err\n")
	}
}
