package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// sweptOnce says when the sweeper has read the next deadline for the first
// time: it then sleeps until that deadline or its SweepInterval.
type sweptOnce struct {
	store.Store
	read chan struct{}
}

func (s *sweptOnce) WorkNextDeadline(ctx context.Context) (time.Time, bool, error) {
	d, ok, err := s.Store.WorkNextDeadline(ctx)
	select {
	case s.read <- struct{}{}:
	default:
	}
	return d, ok, err
}

// TestAWaitEndsAtTheDeadlineOfAUnitAnotherReplicaQueued: a caller waiting
// for a unit that this automator's sweeper knows nothing of (another replica
// queued it, and that replica is gone) still gets the timeout at the
// deadline (guarantee 2), not at the sweeper's next look an hour later.
func TestAWaitEndsAtTheDeadlineOfAUnitAnotherReplicaQueued(t *testing.T) {
	t.Parallel()
	swept := &sweptOnce{read: make(chan struct{}, 1)}
	e := newEnv(t, envOptions{sweepInterval: time.Hour, wrap: func(st store.Store) store.Store {
		swept.Store = st
		return swept
	}})
	waittest.Recv(t, swept.read, "the sweeper's first look for the next deadline")

	// Queued straight into the shared store, as another replica does: this
	// automator's sweeper is not woken, and sleeps for its hour.
	now := time.Now()
	if _, err := e.store.WorkEnqueue(context.Background(), store.WorkEnqueueParams{
		ID: "w-elsewhere", Account: e.account, KeyID: 1, SealedCommand: []byte("sealed"),
		Now: now, Deadline: now.Add(300 * time.Millisecond),
	}); err != nil {
		t.Fatal(err)
	}

	st, err := e.callerClient().Wait(waittest.Context(t, "Wait for a unit to answer at its 300ms deadline"), &automatorv1.WaitRequest{WorkId: "w-elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Fatalf("Wait answered %v (%q); want the unit timed out at its deadline", st.GetState(), st.GetReason())
	}
}
