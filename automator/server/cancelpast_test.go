package server_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// passedOver is a store whose expiries pass over every unit until one
// names a unit (a cancel's, or a waiting caller's), as PostgreSQL's pass
// over a row another session holds (FOR UPDATE SKIP LOCKED: a sweep on
// another replica, a result being written); that one too is passed over.
type passedOver struct {
	store.Store
	named atomic.Bool
}

func (p *passedOver) WorkExpire(ctx context.Context, params store.WorkExpireParams) ([]store.Work, error) {
	if !p.named.Load() {
		if params.ID != "" {
			p.named.Store(true)
		}
		return nil, nil
	}
	return p.Store.WorkExpire(ctx, params)
}

// TestACancelPastTheDeadlineWhoseExpiryIsPassedOverAnswersTheUnitsEnd: a
// cancel of a unit past its deadline whose expiry passes over it (its row
// held by another session) answers the unit's end once it is written, not
// the unit still open: a caller took an open unit for a success (a
// review: an interrupted exec exited 0 for a unit that never ran).
func TestACancelPastTheDeadlineWhoseExpiryIsPassedOverAnswersTheUnitsEnd(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var st *passedOver
	e := newEnv(t, envOptions{clock: clock, sweepInterval: 50 * time.Millisecond, wrap: func(s store.Store) store.Store {
		st = &passedOver{Store: s}
		return st
	}})
	api := e.callerClient()
	u := submit(t, api, e.account, time.Minute)
	clock.Advance(time.Minute + time.Second)
	got, err := api.Cancel(context.Background(), &automatorv1.CancelRequest{WorkId: u.GetWorkId()})
	if err != nil || got.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Fatalf("cancel past the deadline, its first expiry passed over: %v (%q), %v; want the unit timed out", got.GetState(), got.GetReason(), err)
	}
	if !st.named.Load() {
		t.Fatal("no expiry named the unit: the store passed over nothing")
	}
}

// passedOverAlways is a store whose expiries pass over every unit (its
// row held by another session that does not end it).
type passedOverAlways struct{ store.Store }

func (passedOverAlways) WorkExpire(context.Context, store.WorkExpireParams) ([]store.Work, error) {
	return nil, nil
}

// TestACancelPastTheDeadlineWhoseEndIsNotWrittenAsksToBeMadeAgain: when
// the end of a unit past its deadline is not written within the 5 s a
// cancel waits for it, the cancel answers UNAVAILABLE saying so, never the
// unit still open.
func TestACancelPastTheDeadlineWhoseEndIsNotWrittenAsksToBeMadeAgain(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, sweepInterval: 100 * time.Millisecond, wrap: func(s store.Store) store.Store { return passedOverAlways{s} }})
	api := e.callerClient()
	u := submit(t, api, e.account, time.Minute)
	clock.Advance(time.Minute + time.Second)
	got, err := api.Cancel(context.Background(), &automatorv1.CancelRequest{WorkId: u.GetWorkId()})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "is past its deadline, and its end was not written within 5s") {
		t.Fatalf("cancel past the deadline, its expiry always passed over: %v, %v; want UNAVAILABLE saying its end was not written", got.GetState(), err)
	}
}
