package agent

import (
	"context"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/opsgate/opsgate/internal/ctxtime"
)

// Conn is the state of the connection the agent's polls go on: a
// *grpc.ClientConn.
type Conn interface {
	GetState() connectivity.State
	WaitForStateChange(context.Context, connectivity.State) bool
	Connect()
}

// reconnectedPollAfter is the least a failed poll's backoff lasts when the
// connection comes back during it (backOff): a link that connects and then
// fails every poll at once cannot make the proxy poll in a loop. Tests
// change it per Agent (tuning).
const reconnectedPollAfter = time.Second

// backOff waits d after a failed poll, and reports false if ctx ended
// first. When the connection could not be set up during the wait (the
// automator down or restarting, a partition) and then is (it is back, the
// partition healed), the wait ends then, reconnectedPollAfter after it
// began at the earliest: the backoff, up to 15 s, kept a proxy from
// polling for that long after the automator was back, and a poll made
// before gRPC had connected again failed at once and began another. A
// connection that fails otherwise (the automator answers with an error,
// refuses the token, closes each connection once set up) waits all of d.
func (a *Agent) backOff(ctx context.Context, d time.Duration) bool {
	c := a.o.Conn
	if c == nil {
		return ctxtime.Sleep(ctx, d)
	}
	begun := time.Now()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s := c.GetState()
	if s == connectivity.Idle {
		// A connection that was up and failed leaves the channel idle
		// until a call: connect now, so that the wait sees whether the
		// automator can be reached. Once: gRPC's own backoff paces the
		// connections after it.
		c.Connect()
	}
	unreachable := false
	for {
		unreachable = unreachable || s == connectivity.TransientFailure
		if s == connectivity.Ready && unreachable {
			break
		}
		if !c.WaitForStateChange(wctx, s) {
			return ctx.Err() == nil
		}
		s = c.GetState()
	}
	return ctxtime.Sleep(ctx, min(d, a.o.tune.reconnectedPollAfter)-time.Since(begun))
}
