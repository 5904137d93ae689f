package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAResultRecordedByAReplicaThatDiedUnannouncedWakesItsWaiterWhenPostedAgain:
// replica B records a unit's result and dies before it announces the end
// (its NOTIFY goes out after the commit) and before it answers the proxy.
// The proxy posts the result again, through the load balancer, to this
// replica: it is refused, as the unit is ended, but this replica announces
// the end, here and to the other replicas, so the caller waiting for the
// unit here gets its result now, not at the unit's deadline.
func TestAResultRecordedByAReplicaThatDiedUnannouncedWakesItsWaiterWhenPostedAgain(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	reads := &readsOf{read: make(chan struct{}, 10)}
	e := newEnv(t, envOptions{broadcaster: b, wrap: func(st store.Store) store.Store { reads.Store = st; return reads }})
	api, px := e.callerClient(), e.proxyClient()
	u := submit(t, api, e.account, time.Hour)
	resp, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1, Wait: durationpb.New(0)})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v, %v; want the unit", resp, err)
	}
	claim := resp.GetClaims()[0]
	reads.id = u.GetWorkId() // the reads of Submit and Poll are over

	waited := waitInBackground(t, api, u.GetWorkId(), reads)

	// Replica B records the result and dies: this replica hears nothing.
	req := &automatorv1.CompleteRequest{
		WorkId: claim.GetWorkId(), ClaimId: claim.GetClaimId(), InstanceId: "a",
		Outcome:      automatorv1.Outcome_OUTCOME_SUCCEEDED,
		SealedResult: e.sealResult(claim.GetWorkId(), &automatorv1.Result{ExitCode: 7, Stdout: []byte("done")}),
	}
	if _, err := e.store.WorkComplete(t.Context(), store.WorkCompleteParams{
		ID: req.GetWorkId(), ClaimID: req.GetClaimId(), Account: e.account, State: store.StateSucceeded,
		SealedResult: req.GetSealedResult(), Now: time.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	drain(b.published)

	// The proxy, unanswered, posts the same result again here.
	if _, err := px.Complete(t.Context(), req); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the result posted again: %v; want FAILED_PRECONDITION (the unit has ended)", err)
	}
	select {
	case a := <-waited:
		if a.err != nil || a.st.GetState() != automatorv1.State_STATE_SUCCEEDED || a.st.GetResult().GetExitCode() != 7 {
			t.Errorf("Wait answered %v, %v; want the unit succeeded with exit code 7", a.st, a.err)
		}
	case <-time.After(waittest.Bound):
		t.Fatalf("the waiting caller did not get its result within %v of the result being posted again (its deadline is an hour away)", waittest.Bound)
	}
	for {
		select {
		case ev := <-b.published:
			if ev.Kind == server.EventWorkEnded && ev.WorkID == u.GetWorkId() {
				return
			}
		case <-time.After(waittest.Bound):
			t.Fatalf("the end of %s was not announced to the other replicas within %v", u.GetWorkId(), waittest.Bound)
		}
	}
}

// drain empties c of what it holds now.
func drain[T any](c chan T) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestACancelMadeAgainAfterItsReplicaDiedUnannouncedReachesWaiterAndClaimer:
// replica B cancels a unit and dies before it announces the end (and
// before it answers). The caller's client cancels again, through the load
// balancer, here: the unit is cancelled already, and this replica
// announces it, so the caller waiting for it here returns now, not at the
// unit's deadline, and the poll of the instance running it here is told to
// kill it now, not when its window ends.
func TestACancelMadeAgainAfterItsReplicaDiedUnannouncedReachesWaiterAndClaimer(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	reads := &readsOf{read: make(chan struct{}, 10)}
	e := newEnv(t, envOptions{pollWindow: time.Hour, broadcaster: b, wrap: func(st store.Store) store.Store { reads.Store = st; return reads }})
	api, px := e.callerClient(), e.proxyClient()
	u := submit(t, api, e.account, time.Hour)
	resp, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "a", RunId: "run-1", PollSeq: 1, MaxUnits: 1, Wait: durationpb.New(0)})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v, %v; want the unit", resp, err)
	}
	reads.id = u.GetWorkId() // the reads of Submit and Poll are over

	waited := waitInBackground(t, api, u.GetWorkId(), reads)
	// The instance's next poll, running the unit, waits (its window is an hour).
	polled := make(chan *automatorv1.PollResponse, 1)
	go func() {
		resp, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "a", RunId: "run-1", PollSeq: 2, MaxUnits: 0,
			Wait: durationpb.New(time.Hour), Running: []string{u.GetWorkId()}})
		if err != nil {
			t.Errorf("the running instance's poll: %v", err)
		}
		polled <- resp
	}()
	e.awaitWaiting(1) // it looked at its running unit, claimed still, and waits

	// Replica B cancels it and dies: this replica hears nothing.
	if _, err := e.store.WorkCancel(t.Context(), store.WorkCancelParams{ID: u.GetWorkId(), Reason: "cancelled by the caller with API key admin", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	drain(b.published)

	// The caller, unanswered, cancels again here.
	st, err := api.Cancel(t.Context(), &automatorv1.CancelRequest{WorkId: u.GetWorkId()})
	if err != nil || st.GetState() != automatorv1.State_STATE_CANCELLED {
		t.Fatalf("the cancel made again: %v, %v; want the unit cancelled", st, err)
	}
	select {
	case a := <-waited:
		if a.err != nil || a.st.GetState() != automatorv1.State_STATE_CANCELLED {
			t.Errorf("Wait answered %v, %v; want the unit cancelled", a.st, a.err)
		}
	case <-time.After(waittest.Bound):
		t.Errorf("the waiting caller did not return within %v of the cancel made again (its deadline is an hour away)", waittest.Bound)
	}
	select {
	case resp := <-polled:
		if got := resp.GetCancelled(); len(got) != 1 || got[0] != u.GetWorkId() {
			t.Errorf("the running instance's poll answered %v; want the unit %s told cancelled", resp, u.GetWorkId())
		}
	case <-time.After(waittest.Bound):
		t.Errorf("the running instance's poll was not told within %v of the cancel made again (its window is an hour)", waittest.Bound)
	}
}

// TestAnEndLongPastIsNotAnnouncedAgain: a cancel or a result made again is
// announced again only while a lost announcement could still keep someone
// waiting: within a waiter's recheck and a poll's window of the end. Later
// every waiter has read its unit again and every poll has looked again, and
// announcing it would only wake the account's polls for nothing, at the
// pace of whoever repeats the call.
func TestAnEndLongPastIsNotAnnouncedAgain(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, broadcaster: b})
	api, px := e.callerClient(), e.proxyClient()

	cancelled := submit(t, api, e.account, time.Hour)
	if _, err := api.Cancel(t.Context(), &automatorv1.CancelRequest{WorkId: cancelled.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	done := submit(t, api, e.account, time.Hour)
	resp, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1, Wait: durationpb.New(0)})
	if err != nil || len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != done.GetWorkId() {
		t.Fatalf("poll: %v, %v; want the unit %s", resp, err, done.GetWorkId())
	}
	c := resp.GetClaims()[0]
	complete := &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{})}
	if _, err := px.Complete(t.Context(), complete); err != nil {
		t.Fatal(err)
	}

	clock.Advance(time.Minute)
	drain(b.published)
	if _, err := api.Cancel(t.Context(), &automatorv1.CancelRequest{WorkId: cancelled.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := px.Complete(t.Context(), complete); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the result posted again: %v; want FailedPrecondition", err)
	}
	// Both answered: anything they announced is published already.
	select {
	case ev := <-b.published:
		t.Fatalf("published %v for an end a minute old made again", ev)
	default:
	}
}
