package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// windowsNeverEnd is an OnPollWindow hook under which no poll's window
// ends (its poll ends with the server): a poll that is to answer at once
// cannot answer empty at the end of a window that load let run out, and
// one that does not answer fails the test at waittest.Bound.
func windowsNeverEnd(string, string, time.Duration) <-chan time.Time { return nil }

// claimHeldAfter holds, once hold is set, each claim of instance after it
// was made (it found what it found) until release is closed, and tells
// entered: the poll is then registered but not yet parked, so an enqueue
// wakes it rather than handing it the unit.
type claimHeldAfter struct {
	store.Store
	instance string
	hold     atomic.Bool
	entered  chan struct{}
	release  chan struct{}
}

func (g *claimHeldAfter) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	ws, err := g.Store.WorkClaim(ctx, p)
	if p.InstanceID == g.instance && g.hold.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	return ws, err
}

func newClaimHeldAfter(instance string) *claimHeldAfter {
	return &claimHeldAfter{instance: instance, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

// held returns once the claim of its instance is held.
func (g *claimHeldAfter) held(t *testing.T) {
	t.Helper()
	waittest.Recv(t, g.entered, "a claim of "+g.instance+" to reach the store")
}

// announceWhileHeld polls as the gate's instance through px, holds that
// poll's claim, and queues a unit meanwhile, which therefore cannot be
// handed to the poll, only announced; then it releases the claim. It
// returns the unit and the poll's result.
func (g *claimHeldAfter) announceWhileHeld(t *testing.T, e *env, px automatorv1.ProxyServiceClient) (*automatorv1.WorkStatus, <-chan pollResult) {
	t.Helper()
	g.hold.Store(true)
	polled := pollAsync(t.Context(), px, g.instance, 1)
	g.held(t)
	st := submit(t, e.callerClient(), e.account, time.Hour)
	if st.GetState() != automatorv1.State_STATE_QUEUED {
		t.Fatalf("the unit is %v by %q, want queued", st.GetState(), st.GetInstanceId())
	}
	g.hold.Store(false)
	close(g.release)
	return st, polled
}

// TestWakeUpPassesOverAPollThatCannotTake: the oldest waiting poll, whose
// previous token's overlap has ended, claims nothing; a unit another
// replica queued, which reaches this one only as its announcement, goes to
// the next waiting poll, which claims it at once, not at the end of a
// window (none ends here). Both polls are parked before the announcement,
// so only a wake-up that passes over the first reaches the second: the hub
// skipping it, or the first poll, woken, passing the wake-up on (without
// both, the test fails). The clock is injected.
func TestWakeUpPassesOverAPollThatCannotTake(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := newRecordingBroadcaster()
	e := newEnv(t, envOptions{pollWindow: time.Minute, clock: clock, pollWindowEnds: windowsNeverEnd, broadcaster: b})
	newToken, _ := crypto.NewToken("opt_")
	if _, err := e.store.AccountRotate(context.Background(), store.AccountRotateParams{
		Name: e.account, TokenHash: crypto.HashToken(newToken), PreviousUntil: clock.Now().Add(time.Hour), Now: clock.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	pollAsync(t.Context(), e.proxyClient(), "old", 1)
	e.awaitWaiting(1)
	polled := pollAsync(t.Context(), automatorv1.NewProxyServiceClient(e.conn(newToken)), "new", 1)
	e.awaitWaiting(2)
	// The old token's overlap ends; its poll waits on. Both connections
	// are as long silent (the clock is the listener's too), so neither
	// poll is passed over for having gone quiet (hub.quietAfter).
	clock.Advance(time.Hour)

	// Another replica queues a unit: this one learns of it by its
	// announcement alone.
	now := clock.Now()
	if _, err := e.store.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: "w_elsewhere", Account: e.account, KeyID: 1,
		SealedCommand: []byte("sealed"), Now: now, Deadline: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	b.incoming <- server.Event{Kind: server.EventWorkQueued, Account: e.account}
	r := waittest.Recv(t, polled, "the poll that can take the unit to answer with it")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != "w_elsewhere" {
		t.Fatalf("the poll that can take: %v, %v; want unit w_elsewhere, announced", r.err, r.resp.GetClaims())
	}
}
