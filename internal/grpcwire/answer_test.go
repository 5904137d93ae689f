package grpcwire_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestACallPastItsBoundWaitsWhileItsConnectionDelivers: a call whose
// answer has not begun by its bound, over a connection that delivered
// just before, is not given up then; once its connection has delivered
// nothing for Quiet, it is, and the cause says so (ErrNoAnswerOnceQuiet,
// an ErrNoAnswer). Without the connection's deliveries known, the call is
// given up at its bound with ErrNoAnswer.
func TestACallPastItsBoundWaitsWhileItsConnectionDelivers(t *testing.T) {
	t.Parallel()
	var busy atomic.Bool
	busy.Store(true)
	asked := make(chan struct{}, 1)
	heard := func() time.Time {
		var last time.Time
		if busy.Load() {
			last = time.Now()
		}
		select {
		case asked <- struct{}{}:
		default:
		}
		return last
	}
	ctx, cancel := grpcwire.BeginWithinUnlessHeard(context.Background(), 10*time.Millisecond, time.Hour, heard)
	defer cancel()
	waittest.Recv(t, asked, "the bound to pass")
	if err := ctx.Err(); err != nil {
		t.Fatalf("the call ended at its bound (%v, %v), its connection delivering; want it going on", err, context.Cause(ctx))
	}
	busy.Store(false)
	waittest.Recv(t, ctx.Done(), "the call to be given up once its connection is quiet")
	if cause := context.Cause(ctx); cause != grpcwire.ErrNoAnswerOnceQuiet || !errors.Is(cause, grpcwire.ErrNoAnswer) {
		t.Errorf("cause %v; want %v", cause, grpcwire.ErrNoAnswerOnceQuiet)
	}

	ctx, cancel = grpcwire.BeginWithinUnlessHeard(context.Background(), 10*time.Millisecond, time.Hour, nil)
	defer cancel()
	waittest.Recv(t, ctx.Done(), "the call to be given up at its bound")
	if cause := context.Cause(ctx); cause != grpcwire.ErrNoAnswer {
		t.Errorf("cause %v; want %v", cause, grpcwire.ErrNoAnswer)
	}
}
