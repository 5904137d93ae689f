package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// readsOf signals each read of one unit.
type readsOf struct {
	store.Store
	id   string
	read chan struct{}
}

func (r *readsOf) WorkGet(ctx context.Context, id string) (store.Work, error) {
	w, err := r.Store.WorkGet(ctx, id)
	if id == r.id {
		select {
		case r.read <- struct{}{}:
		default: // reads past the buffer (a waiter's rechecks) are not counted
		}
	}
	return w, err
}

// waitAnswer is a Wait's answer.
type waitAnswer struct {
	st  *automatorv1.WorkStatus
	err error
}

// waitInBackground calls Wait for unit id and returns once the call waits:
// it has read the unit twice (to check the caller may, then once
// subscribed to the unit's end). The answer comes on the channel.
func waitInBackground(t *testing.T, api automatorv1.AutomatorServiceClient, id string, reads *readsOf) <-chan waitAnswer {
	t.Helper()
	waited := make(chan waitAnswer, 1)
	go func() {
		st, err := api.Wait(t.Context(), &automatorv1.WaitRequest{WorkId: id})
		waited <- waitAnswer{st, err}
	}()
	waittest.Recv(t, reads.read, "Wait's first read of the unit")
	waittest.Recv(t, reads.read, "Wait's read of the unit once subscribed")
	return waited
}

// applied returns once b's listener has applied every event sent before:
// it takes the next one only then.
func (b *recordingBroadcaster) applied() {
	b.incoming <- server.Event{Kind: server.EventWorkQueued, Account: "nobody"}
}

// TestAWaiterWhoseUnitEndedUnannouncedReadsItWhenListeningResumes: a unit
// ends on another replica and its announcement is lost (this replica's
// event connection was down, and the replay of the gap can miss an end
// that took long to commit). When the Broadcaster listens again
// (EventResumed), the caller waiting for the unit reads it, rather than at
// its deadline.
func TestAWaiterWhoseUnitEndedUnannouncedReadsItWhenListeningResumes(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	reads := &readsOf{read: make(chan struct{}, 10)}
	e := newEnv(t, envOptions{broadcaster: b, wrap: func(st store.Store) store.Store { reads.Store = st; return reads }})
	api := e.callerClient()
	u := submit(t, api, e.account, time.Hour)
	reads.id = u.GetWorkId() // Submit's own reads are over

	waited := waitInBackground(t, api, u.GetWorkId(), reads)

	// Another replica cancels it; this one hears nothing of it.
	if _, err := e.store.WorkCancel(t.Context(), store.WorkCancelParams{ID: u.GetWorkId(), Reason: "cancelled on another replica", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	b.incoming <- server.Event{Kind: server.EventResumed}
	select {
	case a := <-waited:
		if a.err != nil || a.st.GetState() != automatorv1.State_STATE_CANCELLED {
			t.Errorf("Wait answered %v, %v; want the unit cancelled", a.st, a.err)
		}
	case <-time.After(waittest.Bound):
		t.Fatalf("the waiting caller did not read its unit within %v of the listening resuming (its deadline is an hour away)", waittest.Bound)
	}
}

// TestAPollIsToldOfAnUnannouncedEndWhenListeningResumes: a proxy
// process's look at its running units stands in for a second, because an
// end on another replica is announced. When the announcement may have been
// lost (EventResumed), its next poll looks again and is told.
func TestAPollIsToldOfAnUnannouncedEndWhenListeningResumes(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	clock := newFakeClock() // it stands still: every look stays fresh
	e := newEnv(t, envOptions{pollWindow: time.Minute, clock: clock, broadcaster: b})
	ctx := t.Context()
	px := e.proxyClient()
	poll := func(seq uint64, max int32, running ...string) *automatorv1.PollResponse {
		t.Helper()
		resp, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", RunId: "run-1", PollSeq: seq, MaxUnits: max, Wait: durationpb.New(0), Running: running})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	u := submit(t, e.callerClient(), e.account, time.Hour)
	if resp := poll(1, 1); len(resp.GetClaims()) != 1 {
		t.Fatalf("the claiming poll: %v; want the unit", resp)
	}
	if resp := poll(2, 0, u.GetWorkId()); len(resp.GetCancelled()) != 0 {
		t.Fatalf("the poll that looks at the running unit: %v; want nothing ended", resp)
	}

	// Another replica cancels it; this one hears nothing of it, and the
	// look stands in.
	if _, err := e.store.WorkCancel(ctx, store.WorkCancelParams{ID: u.GetWorkId(), Reason: "cancelled on another replica", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if resp := poll(3, 0, u.GetWorkId()); len(resp.GetCancelled()) != 0 {
		t.Fatalf("a poll within the look's second was told %v; the test expects the look to stand in", resp.GetCancelled())
	}

	b.incoming <- server.Event{Kind: server.EventResumed}
	b.applied()
	if resp := poll(4, 0, u.GetWorkId()); len(resp.GetCancelled()) != 1 || resp.GetCancelled()[0] != u.GetWorkId() {
		t.Errorf("the poll after the listening resumed answered %v; want the unit %s told ended", resp, u.GetWorkId())
	}
}

// TestAWaiterWhoseUnitEndedUnannouncedReadsItWithinTheRecheck: another
// replica ended the unit and its announcement was lost (its NOTIFY failed
// while both replicas, and this one's listening, stayed up). The waiting
// caller reads its unit again every WaitRecheck, so it learns of the end
// then, not at the deadline an hour away.
func TestAWaiterWhoseUnitEndedUnannouncedReadsItWithinTheRecheck(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	reads := &readsOf{read: make(chan struct{}, 10)}
	e := newEnv(t, envOptions{broadcaster: b, waitRecheck: 50 * time.Millisecond, wrap: func(st store.Store) store.Store { reads.Store = st; return reads }})
	api := e.callerClient()
	u := submit(t, api, e.account, time.Hour)
	reads.id = u.GetWorkId()

	waited := waitInBackground(t, api, u.GetWorkId(), reads)

	// Another replica cancels it; its announcement never comes.
	if _, err := e.store.WorkCancel(t.Context(), store.WorkCancelParams{ID: u.GetWorkId(), Reason: "cancelled on another replica", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-waited:
		if a.err != nil || a.st.GetState() != automatorv1.State_STATE_CANCELLED {
			t.Errorf("Wait answered %v, %v; want the unit cancelled", a.st, a.err)
		}
	case <-time.After(waittest.Bound):
		t.Fatalf("the waiting caller did not read its unit again within %v (the recheck is every 50 ms; its deadline is an hour away)", waittest.Bound)
	}
}
