package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// awaitWaiting returns once n polls of the account wait for work.
func (e *env) awaitWaiting(n int) {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.srv.WaitingPolls(e.account) != n; {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d polls waiting, want %d", e.srv.WaitingPolls(e.account), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// pollAsync polls as instance in the background; the answer arrives on the
// channel returned.
func pollAsync(ctx context.Context, px automatorv1.ProxyServiceClient, instance string, max int32) <-chan pollResult {
	out := make(chan pollResult, 1)
	go func() {
		resp, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: instance, MaxUnits: max, Wait: durationpb.New(time.Minute)})
		out <- pollResult{resp, err}
	}()
	return out
}

type pollResult struct {
	resp *automatorv1.PollResponse
	err  error
}

func (e *env) completeClaim(px automatorv1.ProxyServiceClient, instance string, c *automatorv1.Claim) {
	e.t.Helper()
	_, err := px.Complete(context.Background(), &automatorv1.CompleteRequest{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: instance,
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{}),
	})
	if err != nil {
		e.t.Fatalf("completing %s as %s: %v", c.GetWorkId(), instance, err)
	}
}

// TestEnqueueHandsTheUnitToAWaitingPoll: with nothing claimable queued, a
// new unit is stored already claimed by the instance whose poll waits, in
// the enqueue's own transaction, and that poll returns it: no claim
// reaches the store.
func TestEnqueueHandsTheUnitToAWaitingPoll(t *testing.T) {
	spy := &claimCounting{}
	e := newEnv(t, envOptions{pollWindow: time.Minute, wrap: func(st store.Store) store.Store { spy.Store = st; return spy }})
	api, px := e.callerClient(), e.proxyClient()
	polled := pollAsync(t.Context(), px, "a", 2)
	e.awaitWaiting(1)
	before := spy.claims.Load()

	st := submit(t, api, e.account, time.Minute)
	if st.GetState() != automatorv1.State_STATE_CLAIMED || st.GetInstanceId() != "a" {
		t.Fatalf("Submit answered %v by %q, want claimed by a", st.GetState(), st.GetInstanceId())
	}
	if !st.GetClaimedAt().AsTime().Equal(st.GetQueuedAt().AsTime()) {
		t.Errorf("claimed at %v, queued at %v: want the same instant", st.GetClaimedAt().AsTime(), st.GetQueuedAt().AsTime())
	}
	r := <-polled
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("poll: %v, claims %v, want %s", r.err, r.resp.GetClaims(), st.GetWorkId())
	}
	if n := spy.claims.Load() - before; n != 0 {
		t.Errorf("%d claims reached the store for a handed unit, want 0", n)
	}
	c := r.resp.GetClaims()[0]
	if cmd := e.openCommand(c); cmd.GetScript() != "x.sh" {
		t.Errorf("handed command runs %q, want x.sh", cmd.GetScript())
	}
	e.completeClaim(px, "a", c)

	// The next unit goes the same way to the instance's next poll; a poll
	// with no free slot is passed over.
	full := pollAsync(t.Context(), px, "full", 0)
	e.awaitWaiting(1)
	polled = pollAsync(t.Context(), px, "b", 1)
	e.awaitWaiting(2)
	if st := submit(t, api, e.account, time.Minute); st.GetInstanceId() != "b" {
		t.Fatalf("second unit handed to %q, want b (the poll with a free slot)", st.GetInstanceId())
	}
	if r := <-polled; r.err != nil || len(r.resp.GetClaims()) != 1 {
		t.Fatalf("second poll: %v, %d claims", r.err, len(r.resp.GetClaims()))
	}
	select {
	case r := <-full:
		t.Fatalf("the poll with no free slot returned: %v %v", r.resp, r.err)
	default:
	}
}

// gatedEnqueue holds every enqueue of a unit stored as claimed until the
// test lets it go.
type gatedEnqueue struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (g *gatedEnqueue) WorkEnqueue(ctx context.Context, p store.WorkEnqueueParams) (store.Work, error) {
	if p.ClaimFor != nil {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Store.WorkEnqueue(ctx, p)
}

// pollsClosed tells when a poll has ended on the server.
type pollsClosed struct{ closed chan struct{} }

func (pollsClosed) WorkQueued(string)                 {}
func (pollsClosed) WorkClaimed(string, time.Duration) {}
func (pollsClosed) WorkFinished(store.Work)           {}
func (m pollsClosed) PollOpened(string) func()        { return func() { m.closed <- struct{}{} } }

var _ server.Metrics = pollsClosed{}

// TestUnitHandedToAPollThatLeftIsQueuedAgain: the poll picked for a unit
// ends while the unit is being stored as its claim; the unit was never
// delivered, so it goes back to the queue and another instance claims it.
func TestUnitHandedToAPollThatLeftIsQueuedAgain(t *testing.T) {
	gate := &gatedEnqueue{entered: make(chan struct{}), release: make(chan struct{})}
	m := pollsClosed{closed: make(chan struct{}, 4)}
	e := newEnv(t, envOptions{pollWindow: time.Minute, metrics: m,
		wrap: func(st store.Store) store.Store { gate.Store = st; return gate }})
	api, px := e.callerClient(), e.proxyClient()
	pctx, leave := context.WithCancel(t.Context())
	polled := pollAsync(pctx, px, "a", 1)
	e.awaitWaiting(1)

	submitted := make(chan *automatorv1.WorkStatus, 1)
	go func() { submitted <- submit(t, api, e.account, time.Minute) }()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the unit was not stored as the waiting poll's claim")
	}
	leave()
	if r := <-polled; status.Code(r.err) != codes.Canceled {
		t.Fatalf("the poll that left: %v, want Canceled", r.err)
	}
	<-m.closed
	close(gate.release)
	st := <-submitted
	if st.GetState() != automatorv1.State_STATE_QUEUED || st.GetInstanceId() != "" {
		t.Errorf("Submit answered %v by %q, want queued again, unclaimed", st.GetState(), st.GetInstanceId())
	}

	r := <-pollAsync(t.Context(), px, "b", 1)
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("the next poll: %v, claims %v, want %s", r.err, r.resp.GetClaims(), st.GetWorkId())
	}
	e.completeClaim(px, "b", r.resp.GetClaims()[0])
}

// leavingClaimer lets every claim of instance "a" wait until its poll has
// left, then stores it anyway.
type leavingClaimer struct {
	store.Store
	entered chan struct{}
}

func (l *leavingClaimer) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	if p.InstanceID == "a" {
		l.entered <- struct{}{}
		<-ctx.Done()
		ctx = context.WithoutCancel(ctx)
	}
	return l.Store.WorkClaim(ctx, p)
}

// TestClaimOfAPollThatLeftIsQueuedAgain: a poll whose caller leaves while
// its claim is being stored sends nothing, so the claimed units go back to
// the queue for the next poll.
func TestClaimOfAPollThatLeftIsQueuedAgain(t *testing.T) {
	claimer := &leavingClaimer{entered: make(chan struct{}, 1)}
	e := newEnv(t, envOptions{pollWindow: 5 * time.Second,
		wrap: func(st store.Store) store.Store { claimer.Store = st; return claimer }})
	api, px := e.callerClient(), e.proxyClient()
	st := submit(t, api, e.account, time.Minute)

	pctx, leave := context.WithCancel(t.Context())
	polled := pollAsync(pctx, px, "a", 1)
	<-claimer.entered
	next := pollAsync(t.Context(), px, "b", 1)
	leave()
	if r := <-polled; status.Code(r.err) != codes.Canceled {
		t.Fatalf("the poll that left: %v, want Canceled", r.err)
	}
	r := <-next
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("the other poll: %v, claims %v, want %s", r.err, r.resp.GetClaims(), st.GetWorkId())
	}
	e.completeClaim(px, "b", r.resp.GetClaims()[0])
}
