// Package waittest bounds what a test waits for, so a test whose feature is
// broken fails naming what did not happen instead of hanging until the go
// test timeout (which panics with every goroutine's stack, hides which test
// broke, and may end the whole package's run).
//
// The bound is generous on purpose: it is not a timing assertion, only the
// point at which "it has not happened yet" becomes "it did not happen".
//
// Only tests import it (test/deps checks that).
package waittest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// Bound is how long a test waits for something that should happen at once
// (a channel to be sent on, a goroutine to end) before it fails: tens of
// seconds, so that a slow, loaded CI machine never trips it.
const Bound = 30 * time.Second

// Recv receives from ch, failing the test if nothing comes within Bound.
// what says what the value stands for ("the cancelled run to end"); it ends
// the failure message "timed out after 30s waiting for WHAT". Like
// t.Fatal, call it from the test's goroutine.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	v, ok := TryRecv(ch)
	if !ok {
		t.Fatalf("timed out after %v waiting for %s", Bound, what)
	}
	return v
}

// TryRecv receives from ch within Bound and says whether it did; for
// goroutines other than the test's, which must not call t.Fatal.
func TryRecv[T any](ch <-chan T) (T, bool) {
	timer := time.NewTimer(Bound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-timer.C:
		var zero T
		return zero, false
	}
}

// Send sends v on ch, failing the test if nobody takes it within Bound.
func Send[T any](t testing.TB, ch chan<- T, v T, what string) {
	t.Helper()
	timer := time.NewTimer(Bound)
	defer timer.Stop()
	select {
	case ch <- v:
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", Bound, what)
	}
}

// Group waits for wg, failing the test if it is not done within Bound.
func Group(t testing.TB, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	Recv(t, done, what)
}

// Until polls cond every few milliseconds, failing the test if it does
// not hold within Bound: for what shows only in state (a row in the
// store, a file), with no event to wait for.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(Bound); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", Bound, what)
		}
	}
}

// Context is t.Context() that also ends after Bound, failing the test
// with "timed out after 30s waiting for WHAT" first: for calls that would
// otherwise wait forever for an answer that does not come (a Wait or an
// ExecuteOnProxy on a unit that never ends). The call then returns
// cancelled.
func Context(t testing.TB, what string) context.Context {
	t.Helper()
	// The failure is said from a timer's goroutine, where t.Helper does
	// not place it: name the caller's line in the message.
	at := ""
	if _, file, line, ok := runtime.Caller(1); ok {
		at = fmt.Sprintf(" (the call at %s:%d)", filepath.Base(file), line)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	var mu sync.Mutex
	ended := false // the test is over: it must not be failed any more
	timer := time.AfterFunc(Bound, func() {
		mu.Lock()
		if !ended {
			t.Errorf("timed out after %v waiting for %s%s", Bound, what, at)
		}
		mu.Unlock()
		cancel(errBound) // only now, so the failure is said before the call returns
	})
	t.Cleanup(func() {
		mu.Lock()
		ended = true
		mu.Unlock()
		timer.Stop()
		cancel(context.Canceled)
	})
	return ctx
}

var errBound = errors.New("waittest: the bound passed")
