package cli

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestASecondStopIsSeenWhenBothSignalsCameBeforeTheFirstStopped: a second
// Ctrl-C or SIGTERM ends the grace period. When both signals are counted
// before the first has cancelled the run's context (they came close
// together), the second stop is taken once the context is done, without
// a third signal. Before, it was never taken and the grace period was
// waited out (a review).
func TestASecondStopIsSeenWhenBothSignalsCameBeforeTheFirstStopped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal) // unbuffered: a send returns once it was taken
	again, quit := make(chan struct{}), make(chan struct{})
	defer close(quit)
	go watchSecondStop(ctx, sigs, again, quit)
	// A send returns once the signal was taken, not once it was looked
	// at: the third is taken only once the second was, and found no stop
	// yet. So all were counted before the context was done.
	for range 3 {
		select {
		case sigs <- syscall.SIGTERM:
		case <-again:
			t.Fatal("a second stop taken before the first had stopped anything")
		}
	}
	cancel()
	select {
	case <-again:
	case <-time.After(10 * time.Second):
		t.Fatal("10s after the first stop, two stop signals are still not taken for a second stop")
	}
}

// TestOneStopSignalIsNoSecondStop: one signal, with the context done, is
// the first stop only; a second one ends the grace period.
func TestOneStopSignalIsNoSecondStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal)
	again, quit := make(chan struct{}), make(chan struct{})
	defer close(quit)
	go watchSecondStop(ctx, sigs, again, quit)
	cancel()
	sigs <- syscall.SIGTERM
	// The second is taken only once the first was looked at: had that
	// been taken for a second stop, again would be closed instead.
	select {
	case sigs <- syscall.SIGINT:
	case <-again:
		t.Fatal("one stop signal taken for a second stop")
	}
	select {
	case <-again:
	case <-time.After(10 * time.Second):
		t.Fatal("a second stop signal after the first stop was not taken")
	}
}
