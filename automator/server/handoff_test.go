package server_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
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

// awaitWaiting returns once n polls of the account wait for work.
func (e *env) awaitWaiting(n int) {
	e.t.Helper()
	for deadline := time.Now().Add(waittest.Bound); e.srv.WaitingPolls(e.account) != n; {
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
	t.Parallel()
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
	r := waittest.Recv(t, polled, "the waiting poll to answer with the unit handed to it")
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
	if r := waittest.Recv(t, polled, "b's poll to answer with the unit handed to it"); r.err != nil || len(r.resp.GetClaims()) != 1 {
		t.Fatalf("second poll: %v, %d claims", r.err, len(r.resp.GetClaims()))
	}
	select {
	case r := <-full:
		t.Fatalf("the poll with no free slot returned: %v %v", r.resp, r.err)
	default:
	}
}

// TestHandedUnitIsNotCountedAgainstTheQueueCap: a unit handed to a waiting
// poll never joins the queue, so its Submit does not read the queue's
// length; a unit that is queued still does.
func TestHandedUnitIsNotCountedAgainstTheQueueCap(t *testing.T) {
	t.Parallel()
	spy := &server.QueueCounts{}
	e := newEnv(t, envOptions{pollWindow: time.Minute, wrap: func(st store.Store) store.Store { spy.Store = st; return spy }})
	api, px := e.callerClient(), e.proxyClient()
	polled := pollAsync(t.Context(), px, "a", 1)
	e.awaitWaiting(1)
	if st := submit(t, api, e.account, time.Minute); st.GetInstanceId() != "a" {
		t.Fatalf("unit handed to %q, want a", st.GetInstanceId())
	}
	if r := waittest.Recv(t, polled, "the waiting poll to answer with the unit handed to it"); r.err != nil || len(r.resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v, %d claims", r.err, len(r.resp.GetClaims()))
	}
	if n := spy.Calls(); n != 0 {
		t.Errorf("a unit handed to a waiting poll read the queue length %d times, want 0", n)
	}

	// No poll waits now: the next unit is queued, and its cap is checked.
	if st := submit(t, api, e.account, time.Minute); st.GetState() != automatorv1.State_STATE_QUEUED {
		t.Fatalf("with no poll waiting the unit is %v, want queued", st.GetState())
	}
	if n := spy.Calls(); n != 1 {
		t.Errorf("a queued unit read the queue length %d times, want 1", n)
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
func (pollsClosed) WorkUndelivered(string)            {}
func (m pollsClosed) PollOpened(string) func()        { return func() { m.closed <- struct{}{} } }

var _ server.Metrics = pollsClosed{}

// TestUnitHandedToAPollThatLeftFailsAtOnceAndIsNeverGivenToAnother: the
// poll picked for a unit ends while the unit is being stored as its claim.
// The claim stands (guarantee 1: a claimed unit is never handed to another
// instance), and since it can never be sent, the unit fails at once, long
// before its deadline, saying that its script did not run.
func TestUnitHandedToAPollThatLeftFailsAtOnceAndIsNeverGivenToAnother(t *testing.T) {
	t.Parallel()
	gate := &gatedEnqueue{entered: make(chan struct{}), release: make(chan struct{})}
	m := pollsClosed{closed: make(chan struct{}, 4)}
	e := newEnv(t, envOptions{pollWindow: time.Minute, metrics: m,
		wrap: func(st store.Store) store.Store { gate.Store = st; return gate }})
	api, px := e.callerClient(), e.proxyClient()
	pctx, leave := context.WithCancel(t.Context())
	polled := pollAsync(pctx, px, "a", 1)
	e.awaitWaiting(1)

	submitted := make(chan *automatorv1.WorkStatus, 1)
	go func() { submitted <- submit(t, api, e.account, time.Hour) }()
	waittest.Recv(t, gate.entered, "the unit to be stored as the waiting poll's claim")
	leave()
	if r := waittest.Recv(t, polled, "the poll that left to end"); status.Code(r.err) != codes.Canceled {
		t.Fatalf("the poll that left: %v, want Canceled", r.err)
	}
	waittest.Recv(t, m.closed, "the poll that left to end on the server")
	close(gate.release)
	st := waittest.Recv(t, submitted, "Submit to answer once the unit's claim was stored")
	if st.GetState() != automatorv1.State_STATE_CLAIMED || st.GetInstanceId() != "a" {
		t.Fatalf("Submit answered %v by %q, want claimed by a", st.GetState(), st.GetInstanceId())
	}
	other := pollAsync(t.Context(), px, "b", 1)
	end, err := api.Wait(waittest.Context(t, "the unit claimed for the poll that left to fail"), &automatorv1.WaitRequest{WorkId: st.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	if want := "its claim never reached instance a: its poll ended while it was stored; the script did not run"; end.GetState() != automatorv1.State_STATE_FAILED || end.GetReason() != want {
		t.Errorf("the unit ended %v (%q), want failed (%q)", end.GetState(), end.GetReason(), want)
	}
	select {
	case r := <-other:
		t.Fatalf("another instance's poll returned while the unit was claimed: %v %v", r.resp, r.err)
	default:
	}
}

// TestPollWhoseWindowEndsWhileItsUnitIsStoredAnswersWithIt: a poll's
// window ends while a unit is being stored as its claim; the poll waits for
// it and answers with it instead of leaving it behind.
//
// The test ends the window (OnPollWindow), once the unit is held on its way
// into the store: no timer can end it before the unit was handed to the
// poll, however slowly the Submit arrives.
func TestPollWhoseWindowEndsWhileItsUnitIsStoredAnswersWithIt(t *testing.T) {
	t.Parallel()
	gate := &gatedEnqueue{entered: make(chan struct{}), release: make(chan struct{})}
	left := make(chan int, 1)
	windowEnds := make(chan time.Time)
	e := newEnv(t, envOptions{pollWindow: time.Minute,
		pollWindowEnds: func(string, string, time.Duration) <-chan time.Time { return windowEnds },
		pollLeft: func(_, _ string, inFlight int) {
			select {
			case left <- inFlight: // the first: the test's poll
			default:
			}
		},
		wrap: func(st store.Store) store.Store { gate.Store = st; return gate }})
	api, px := e.callerClient(), e.proxyClient()
	polled := pollAsync(t.Context(), px, "a", 1)
	e.awaitWaiting(1)
	submitted := make(chan *automatorv1.WorkStatus, 1)
	go func() { submitted <- submit(t, api, e.account, time.Minute) }()
	waittest.Recv(t, gate.entered, "the unit to be stored as the waiting poll's claim")
	// The window ends with the unit still held in the store: the poll
	// leaves the waiting list with one unit in flight, which it is to
	// wait for.
	close(windowEnds)
	if n := waittest.Recv(t, left, "the poll's window to end while its unit is stored"); n != 1 {
		t.Fatalf("the poll left with %d units in flight, want 1", n)
	}
	close(gate.release)
	st := waittest.Recv(t, submitted, "Submit to answer once the unit's claim was stored")
	r := waittest.Recv(t, polled, "the poll whose window ended to answer with the unit stored as its claim")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("poll: %v, claims %v, want %s", r.err, r.resp.GetClaims(), st.GetWorkId())
	}
	e.completeClaim(px, "a", r.resp.GetClaims()[0])
}

// TestUnitsQueuedTogetherGoToOneWaitingPoll: units queued while the first
// one handed to a waiting poll is being stored go to that poll too, up to
// its free slots, and it answers with all of them at once.
func TestUnitsQueuedTogetherGoToOneWaitingPoll(t *testing.T) {
	t.Parallel()
	gate := &gatedEnqueue{entered: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, envOptions{pollWindow: time.Minute, wrap: func(st store.Store) store.Store { gate.Store = st; return gate }})
	api, px := e.callerClient(), e.proxyClient()
	polled := pollAsync(t.Context(), px, "a", 2)
	e.awaitWaiting(1)
	other := pollAsync(t.Context(), px, "b", 2)
	e.awaitWaiting(2)

	submitted := make(chan *automatorv1.WorkStatus, 3)
	for range 3 {
		go func() { submitted <- submit(t, api, e.account, time.Minute) }()
		waittest.Recv(t, gate.entered, "each unit to be stored as a waiting poll's claim")
	}
	close(gate.release)
	by := map[string]int{}
	for range 3 {
		by[waittest.Recv(t, submitted, "each Submit to answer once its unit's claim was stored").GetInstanceId()]++
	}
	if by["a"] != 2 || by["b"] != 1 {
		t.Fatalf("units handed to %v, want 2 to a (its free slots) and 1 to b", by)
	}
	if r := waittest.Recv(t, polled, "a's poll to answer with the units handed to it"); r.err != nil || len(r.resp.GetClaims()) != 2 {
		t.Fatalf("a's poll: %v, %d claims, want 2", r.err, len(r.resp.GetClaims()))
	}
	if r := waittest.Recv(t, other, "b's poll to answer with the unit handed to it"); r.err != nil || len(r.resp.GetClaims()) != 1 {
		t.Fatalf("b's poll: %v, %d claims, want 1", r.err, len(r.resp.GetClaims()))
	}
}

// gatedClaim holds every claim, once hold is set, until release is closed,
// telling entered how many units it asks for.
type gatedClaim struct {
	store.Store
	hold    atomic.Bool
	entered chan int
	release chan struct{}
}

func (g *gatedClaim) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	if g.hold.Load() {
		g.entered <- p.Max
		<-g.release
	}
	return g.Store.WorkClaim(ctx, p)
}

func newGatedClaimEnv(t *testing.T, clock server.Clock) (*env, *gatedClaim) {
	gate := &gatedClaim{entered: make(chan int, 1), release: make(chan struct{})}
	e := newEnv(t, envOptions{pollWindow: time.Minute, clock: clock,
		wrap: func(st store.Store) store.Store { gate.Store = st; return gate }})
	return e, gate
}

// heldClaim returns how many units the claim now held asks for.
func (g *gatedClaim) heldClaim(t *testing.T) int {
	t.Helper()
	return waittest.Recv(t, g.entered, "a claim to reach the store")
}

func claimIDs(r pollResult) []string {
	var ids []string
	for _, c := range r.resp.GetClaims() {
		ids = append(ids, c.GetWorkId())
	}
	return ids
}

// TestUnitsQueuedWhileAPollClaimsGoToThatPoll: when the account's latest
// claim took fewer units than it asked for (the queue drains as fast as it
// fills), a poll that has to claim asks for half its slots and is handed
// units queued meanwhile in the other half: stored as claimed by its
// instance, not queued behind its claim for the next poll to claim again.
// It answers with both, the units queued before its claim first.
func TestUnitsQueuedWhileAPollClaimsGoToThatPoll(t *testing.T) {
	t.Parallel()
	e, gate := newGatedClaimEnv(t, newFakeClock())
	api, px := e.callerClient(), e.proxyClient()
	u0 := submit(t, api, e.account, time.Minute)
	first, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 4, Wait: durationpb.New(time.Minute)})
	if err != nil || len(first.GetClaims()) != 1 || first.GetClaims()[0].GetWorkId() != u0.GetWorkId() {
		t.Fatalf("first poll: %v, claims %v, want %s", err, first.GetClaims(), u0.GetWorkId())
	}
	e.completeClaim(px, "a", first.GetClaims()[0]) // 1 of 4: that claim drained the queue

	u1 := submit(t, api, e.account, time.Minute) // no poll waits: queued
	if u1.GetState() != automatorv1.State_STATE_QUEUED {
		t.Fatalf("u1 is %v, want queued", u1.GetState())
	}
	gate.hold.Store(true)
	polled := pollAsync(t.Context(), px, "b", 4)
	if n := gate.heldClaim(t); n != 2 {
		t.Fatalf("b's claim asks for %d units, want 2 (half its 4 slots)", n)
	}
	u2 := submit(t, api, e.account, time.Minute)
	if u2.GetState() != automatorv1.State_STATE_CLAIMED || u2.GetInstanceId() != "b" {
		t.Fatalf("u2, queued while b claims, is %v by %q, want claimed by b", u2.GetState(), u2.GetInstanceId())
	}
	if !u2.GetClaimedAt().AsTime().Equal(u2.GetQueuedAt().AsTime()) {
		t.Errorf("u2 claimed at %v, queued at %v: want one write", u2.GetClaimedAt().AsTime(), u2.GetQueuedAt().AsTime())
	}
	gate.hold.Store(false)
	close(gate.release)
	r := waittest.Recv(t, polled, "b's poll to answer once its held claim was released")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got, want := claimIDs(r), []string{u1.GetWorkId(), u2.GetWorkId()}; !slices.Equal(got, want) {
		t.Fatalf("b's poll answered %v, want %v (the queued unit first)", got, want)
	}
	for _, c := range r.resp.GetClaims() {
		e.completeClaim(px, "b", c)
	}
}

// TestAPollBehindABacklogClaimsWithAllItsSlots: when the latest claim took
// all it asked for, units may still wait in the queue, and a unit handed
// to a claiming poll would overtake them: the next poll claims with all
// its slots and a unit queued meanwhile joins the queue, behind the older
// ones. So does a poll whose account's last short claim is a while ago.
func TestAPollBehindABacklogClaimsWithAllItsSlots(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e, gate := newGatedClaimEnv(t, clock)
	api, px := e.callerClient(), e.proxyClient()
	// Each unit is queued a millisecond after the one before: on the fake
	// clock units queued together tie, and their ids, whose order within a
	// millisecond is random, would decide which is oldest.
	var queued []string
	for range 3 {
		queued = append(queued, submit(t, api, e.account, time.Hour).GetWorkId())
		clock.Advance(time.Millisecond)
	}
	first, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 2, Wait: durationpb.New(time.Minute)})
	if err != nil || len(first.GetClaims()) != 2 {
		t.Fatalf("first poll: %v, %d claims, want 2 (all it asked for)", err, len(first.GetClaims()))
	}

	gate.hold.Store(true)
	polled := pollAsync(t.Context(), px, "b", 4)
	if n := gate.heldClaim(t); n != 4 {
		t.Fatalf("b's claim behind a backlog asks for %d units, want all 4", n)
	}
	u3 := submit(t, api, e.account, time.Hour)
	if u3.GetState() != automatorv1.State_STATE_QUEUED {
		t.Fatalf("a unit queued behind a backlog is %v by %q, want queued", u3.GetState(), u3.GetInstanceId())
	}
	waittest.Send(t, gate.release, struct{}{}, "b's held claim to take its release")
	r := waittest.Recv(t, polled, "b's poll to answer once its held claim was released")
	if got, want := claimIDs(r), []string{queued[2], u3.GetWorkId()}; r.err != nil || !slices.Equal(got, want) {
		t.Fatalf("b's poll: %v, %v, want %v (oldest first)", r.err, got, want)
	}

	// b's claim was short, but two seconds ago by the time c polls.
	submit(t, api, e.account, time.Hour)
	clock.Advance(2 * time.Second)
	polled = pollAsync(t.Context(), px, "c", 4)
	if n := gate.heldClaim(t); n != 4 {
		t.Fatalf("c's claim, two seconds after the last short one, asks for %d units, want all 4", n)
	}
	gate.hold.Store(false)
	close(gate.release)
	if r := waittest.Recv(t, polled, "c's poll to answer once its held claim was released"); r.err != nil || len(r.resp.GetClaims()) != 1 {
		t.Fatalf("c's poll: %v, %d claims, want 1", r.err, len(r.resp.GetClaims()))
	}
}

// lostEnqueueAnswer is a store whose enqueue of a unit handed to a waiting
// poll commits and then fails, as when PostgreSQL's answer to a committed
// batch is lost with its connection.
type lostEnqueueAnswer struct {
	store.Store
	stored chan string // the id of the unit committed
}

func (l *lostEnqueueAnswer) WorkEnqueue(ctx context.Context, p store.WorkEnqueueParams) (store.Work, error) {
	w, err := l.Store.WorkEnqueue(ctx, p)
	if err != nil || p.ClaimFor == nil {
		return w, err
	}
	l.stored <- w.ID
	return store.Work{}, errors.New("the connection was lost after the batch was sent")
}

// TestAUnitHandedToAPollWhoseEnqueueAnswerWasLostFailsAtOnce: an enqueue
// that stores a unit as a waiting poll's claim may commit and still fail
// (its answer lost). The poll is not answered with the unit, and the
// proxy, whose poll was answered or still waits, never says it lost it:
// the unit, if it was stored, fails at once as never delivered instead of
// timing out at its deadline.
func TestAUnitHandedToAPollWhoseEnqueueAnswerWasLostFailsAtOnce(t *testing.T) {
	t.Parallel()
	lost := &lostEnqueueAnswer{stored: make(chan string, 1)}
	e := newEnv(t, envOptions{pollWindow: time.Minute, wrap: func(st store.Store) store.Store { lost.Store = st; return lost }})
	api, px := e.callerClient(), e.proxyClient()
	waiting := pollAsync(t.Context(), px, "a", 1)
	e.awaitWaiting(1)
	if _, err := api.Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Hour)}); err == nil {
		t.Fatal("the submit whose enqueue failed succeeded")
	}
	id := waittest.Recv(t, lost.stored, "the unit to be stored as the poll's claim")
	st, err := api.Wait(waittest.Context(t, "the unit stored for the poll to end"), &automatorv1.WaitRequest{WorkId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != automatorv1.State_STATE_FAILED || !strings.HasSuffix(st.GetReason(), "; the script did not run") {
		t.Errorf("the unit stored as the claim of a poll not answered with it: %v (%q); want failed, not run", st.GetState(), st.GetReason())
	}
	select {
	case r := <-waiting:
		t.Errorf("the poll answered %v, %v; want it still waiting, not handed the unit", r.resp, r.err)
	default:
	}
}

// TestAnAnswerWithClaimsSaysHowLongThePollWasHeld: a poll's answer with
// claims says how long the automator held the poll before measuring the
// claims' remaining times (PollResponse.held), so that the proxy counts
// them from its sending of the poll plus that, not from the answer's
// arrival, which a slow link makes later (a review: a script ran 2 s past
// its unit's deadline); an answer without claims says nothing.
func TestAnAnswerWithClaimsSaysHowLongThePollWasHeld(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, pollWindow: time.Minute})
	api, px := e.callerClient(), e.proxyClient()
	polled := pollAsync(t.Context(), px, "a", 1)
	e.awaitWaiting(1)
	clock.Advance(7 * time.Second)
	st := submit(t, api, e.account, time.Minute)
	r := waittest.Recv(t, polled, "the waiting poll to answer with the unit handed to it")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("poll: %v, claims %v, want %s", r.err, r.resp.GetClaims(), st.GetWorkId())
	}
	if held, remaining := r.resp.GetHeld().AsDuration(), r.resp.GetClaims()[0].GetRemaining().AsDuration(); held != 7*time.Second || remaining != time.Minute {
		t.Errorf("the answer says the poll was held %v (set: %t), the claim's remaining %v; want 7s and 1m", held, r.resp.GetHeld() != nil, remaining)
	}
	e.completeClaim(px, "a", r.resp.GetClaims()[0])
	resp, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1, Wait: durationpb.New(0)})
	if err != nil || len(resp.GetClaims()) != 0 || resp.Held != nil {
		t.Errorf("an answer without claims: %v, held %v; want none", err, resp.GetHeld())
	}
}
