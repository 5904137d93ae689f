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
