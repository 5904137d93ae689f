package server_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// steppingExpiry is a store whose clock (the automator's) steps back by
// step at the first expiry asked for at or after deadline, as an NTP step
// would just as the deadline came. It counts the expiries asked for since
// by waiting callers (within an RPC) and by the sweeper (outside any).
type steppingExpiry struct {
	store.Store
	clock    *fakeClock
	step     time.Duration
	deadline time.Time

	mu      sync.Mutex
	stepped bool
	callers atomic.Int64
	sweeps  atomic.Int64
}

func (s *steppingExpiry) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	s.mu.Lock()
	if !s.stepped && !p.Now.Before(s.deadline) {
		s.clock.Advance(s.step)
		s.stepped = true
	}
	if s.stepped {
		p.Now = s.clock.Now()
		if p.Audit != nil {
			p.Audit.At = p.Now
		}
		if _, ok := peer.FromContext(ctx); ok {
			s.callers.Add(1)
		} else {
			s.sweeps.Add(1)
		}
	}
	s.mu.Unlock()
	return s.Store.WorkExpire(ctx, p)
}

// TestWaitingCallerFollowsTheClockWhenItStepsBack: when the automator's
// clock steps back an hour as a unit's deadline comes, the unit's deadline
// is an hour away on that clock. A caller waiting for it looks once when
// its timer fires and then waits for the deadline as the clock now says,
// as the sweeper does; it does not ask the store to expire the unit every
// SweepInterval for that hour (with many callers waiting, a write each per
// SweepInterval).
func TestWaitingCallerFollowsTheClockWhenItStepsBack(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	spy := &steppingExpiry{clock: clock, step: -time.Hour}
	e := newEnv(t, envOptions{clock: clock, sweepInterval: 20 * time.Millisecond, wrap: func(st store.Store) store.Store { spy.Store = st; return spy }})
	caller := e.callerClient()
	w := submit(t, caller, e.account, time.Second)
	spy.mu.Lock()
	spy.deadline = w.GetDeadline().AsTime()
	spy.mu.Unlock()

	ctx, cancel := context.WithCancel(waittest.Context(t, "the Wait to be cancelled by the test"))
	waited := make(chan error, 1)
	go func() {
		_, err := caller.Wait(ctx, &automatorv1.WaitRequest{WorkId: w.GetWorkId()})
		waited <- err
	}()
	waittest.Until(t, "the caller's timer to fire at the deadline after the clock stepped back", func() bool { return spy.callers.Load() >= 1 })
	from := spy.sweeps.Load()
	waittest.Until(t, "ten sweeps after the caller's look", func() bool { return spy.sweeps.Load() >= from+10 })
	if n := spy.callers.Load(); n != 1 {
		t.Errorf("the waiting caller asked for %d expiries while the sweeper swept 10 times, want 1 (at its timer; then at the deadline on the stepped clock, an hour away)", n)
	}
	st, err := caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: w.GetWorkId()})
	if err != nil || st.GetState() != automatorv1.State_STATE_QUEUED {
		t.Errorf("unit %v, %v; want still queued: its deadline is an hour away on the automator's clock", st.GetState(), err)
	}
	cancel()
	waittest.Recv(t, waited, "the Wait to return once cancelled")
}
