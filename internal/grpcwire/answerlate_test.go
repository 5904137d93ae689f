package grpcwire

import (
	"context"
	"testing"
	"time"
)

// TestABoundThatFiresLateWaitsOnceMore: a bound's timer that fires a
// second or more past its time tells that the process was stopped
// meanwhile (SIGSTOP, a frozen virtual machine), and that an answer that
// came meanwhile may not have been read yet: the call is given Quiet
// more, once, rather than given up as the automator's fault (a review: a
// proxy paused 48 s blamed the automator as it resumed). A timer that
// fires late again, or on time, gives it up.
func TestABoundThatFiresLateWaitsOnceMore(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	b := &beginTimer{stop: stop, due: time.Now().Add(-48 * time.Second)}
	b.t = time.AfterFunc(time.Hour, func() {})
	defer b.t.Stop()
	b.fire()
	if ctx.Err() != nil {
		t.Fatalf("a bound fired 48 s late gave the call up (%v); want it given Quiet more", context.Cause(ctx))
	}
	if wait := time.Until(b.due); wait <= 0 || wait > Quiet {
		t.Fatalf("set again for %v; want Quiet (%v)", wait, Quiet)
	}
	b.due = time.Now().Add(-time.Minute) // late again
	b.fire()
	if context.Cause(ctx) != ErrNoAnswer {
		t.Fatalf("a second late fire: cause %v; want the call given up, %v", context.Cause(ctx), ErrNoAnswer)
	}
}
