package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// expireToken rotates the account's token the way `account rotate-key`
// does (the old one usable for an hour), then moves clock past that hour:
// e.proxyClient() holds the expired token from then on. It returns a
// proxy client holding the new one.
func (e *env) expireToken(clock *fakeClock) automatorv1.ProxyServiceClient {
	e.t.Helper()
	newToken, _ := crypto.NewToken("opt_")
	if _, err := e.store.AccountRotate(context.Background(), store.AccountRotateParams{
		Name: e.account, TokenHash: crypto.HashToken(newToken), PreviousUntil: clock.Now().Add(time.Hour), Now: clock.Now(),
	}); err != nil {
		e.t.Fatal(err)
	}
	clock.Advance(time.Hour)
	return automatorv1.NewProxyServiceClient(e.conn(newToken))
}

// instancesListed is ListInstances of e's account, by instance id.
func (e *env) instancesListed() map[string]*automatorv1.Instance {
	e.t.Helper()
	list, err := e.callerClient().ListInstances(context.Background(), &automatorv1.ListInstancesRequest{Account: e.account})
	if err != nil {
		e.t.Fatalf("ListInstances: %v", err)
	}
	out := map[string]*automatorv1.Instance{}
	for _, in := range list.GetInstances() {
		out[in.GetInstanceId()] = in
	}
	return out
}

// wantTokenExpiredRefusal checks that err is the refusal a poll with an
// expired token has always had: Unauthenticated, in the same words.
func wantTokenExpiredRefusal(t *testing.T, err error) {
	t.Helper()
	const why = "account token expired: it was rotated and its overlap window has ended; install the account's new profile"
	if status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != why {
		t.Fatalf("poll with the expired token: %v, want Unauthenticated: %s", err, why)
	}
}

// TestAnInstanceOnAnExpiredTokenIsListedRefusedForItNotOffline: a proxy
// still running the whole profile of before `account rotate-key` is
// refused at authentication once the rotation's overlap ends. From its
// first such poll on, ListInstances shows it refused for that cause (no
// key ids), not online, and the account's statistics count it out; it
// does not go offline while it polls. Its refused polls after that are
// kept in memory like accepted ones (written at the next flush); its
// first poll with the new profile is accepted and shows it online at once.
// The proxy is told what it always was.
func TestAnInstanceOnAnExpiredTokenIsListedRefusedForItNotOffline(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	e.srv.BatchPolls()
	within := server.InstanceOnlineWithin(2 * time.Second) // newEnv's poll window
	poll := func(c automatorv1.ProxyServiceClient, seq uint64) error {
		_, err := c.Poll(context.Background(), &automatorv1.PollRequest{
			InstanceId: "a", Hostname: "a.example", Version: "v1", Wait: durationpb.New(0), RunId: "run-1", PollSeq: seq, KeyIds: []uint32{1}})
		return err
	}
	want := func(refused bool, lastPoll time.Time) {
		t.Helper()
		in := e.instancesListed()["a"]
		stats, err := e.store.AccountStats(context.Background(), store.AccountStatsParams{OnlineSince: clock.Now().Add(-within)})
		if err != nil || len(stats) != 1 {
			t.Fatalf("account statistics: %v, %v", stats, err)
		}
		cause := automatorv1.RefusedCause_REFUSED_CAUSE_UNSPECIFIED
		if refused {
			cause = automatorv1.RefusedCause_REFUSED_CAUSE_TOKEN_EXPIRED
		}
		if in == nil || in.GetRefused() != refused || in.GetRefusedCause() != cause || len(in.GetRefusedKeyIds()) != 0 ||
			in.GetOnline() == refused || (stats[0].InstancesOnline == 1) == refused || !in.GetLastPollAt().AsTime().Equal(lastPoll) {
			t.Errorf("ListInstances says %v; the listings count %d online; want refused %v (cause %v, no key ids), online %v, last poll %v",
				in, stats[0].InstancesOnline, refused, cause, !refused, lastPoll)
		}
	}

	oldProxy := e.proxyClient()
	if err := poll(oldProxy, 1); err != nil {
		t.Fatalf("poll before the rotation: %v", err)
	}
	want(false, clock.Now())

	newProxy := e.expireToken(clock)
	wantTokenExpiredRefusal(t, poll(oldProxy, 2))
	refusedAt := clock.Now()
	want(true, refusedAt)

	// Polling on with backoff, long past two poll windows: still refused,
	// not offline, once its polls kept in memory are written.
	clock.Advance(within + time.Minute)
	wantTokenExpiredRefusal(t, poll(oldProxy, 3))
	want(true, refusedAt) // no change: kept in memory
	if err := e.srv.FlushInstances(context.Background()); err != nil {
		t.Fatal(err)
	}
	want(true, clock.Now())

	// The latest profile installed: accepted, online at once.
	clock.Advance(time.Second)
	if err := poll(newProxy, 4); err != nil {
		t.Fatalf("poll with the new token: %v", err)
	}
	want(false, clock.Now())
}

// TestOnlyAnExpiredTokensValidPollWithinTheBudgetIsRecorded: a poll with a
// token that never was the account's records nothing, whatever instance
// it names; so does a poll with the expired token whose instance id or
// hostname a poll would be refused for, and one past its source's budget
// of failed authentications (ResourceExhausted). Each is refused as it
// always was.
func TestOnlyAnExpiredTokensValidPollWithinTheBudgetIsRecorded(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, limits: server.Limits{FailedAuthBurst: 4, FailedAuthRefill: time.Hour}})
	oldProxy := e.proxyClient()
	e.expireToken(clock)

	unknown, _ := crypto.NewToken("opt_")
	if _, err := pollNow(automatorv1.NewProxyServiceClient(e.conn(unknown)), "stranger", 0); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("poll with an unknown token: %v, want Unauthenticated", err)
	}
	for _, req := range []*automatorv1.PollRequest{
		{InstanceId: "bad\u200bid"},
		{InstanceId: "bad-host", Hostname: "a\x1b[2Jb"},
	} {
		req.Wait = durationpb.New(0)
		_, err := oldProxy.Poll(context.Background(), req)
		wantTokenExpiredRefusal(t, err)
	}
	// The budget's fourth failure is the last within it.
	if _, err := pollNow(oldProxy, "last", 0); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("poll with the expired token within the budget: %v, want Unauthenticated", err)
	}
	if _, err := pollNow(oldProxy, "over", 0); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("poll with the expired token past the budget: %v, want ResourceExhausted", err)
	}
	got := e.instancesListed()
	if len(got) != 1 || got["last"].GetRefusedCause() != automatorv1.RefusedCause_REFUSED_CAUSE_TOKEN_EXPIRED {
		t.Errorf("instances listed: %v; want only instance last, refused for its expired token", got)
	}
}

// writeCounter counts the writes of instances' polls.
type writeCounter struct {
	store.Store
	mu      sync.Mutex
	single  int
	batches int
}

func (c *writeCounter) InstanceSeen(ctx context.Context, p store.InstanceSeenParams) error {
	c.mu.Lock()
	c.single++
	c.mu.Unlock()
	return c.Store.InstanceSeen(ctx, p)
}

func (c *writeCounter) InstancesSeen(ctx context.Context, ps []store.InstanceSeenParams) ([]store.InstanceSeenParams, error) {
	c.mu.Lock()
	c.batches++
	c.mu.Unlock()
	return c.Store.InstancesSeen(ctx, ps)
}

func (c *writeCounter) counts() (single, batches int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.single, c.batches
}

// TestAFloodOfExpiredTokenPollsWritesAtMostOnceAWhile: polls with an
// expired token, as many as its holder likes, of one instance write its
// record once, then are kept in memory as accepted polls are: none more
// is written until the instance changes or the next flush.
func TestAFloodOfExpiredTokenPollsWritesAtMostOnceAWhile(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	counter := &writeCounter{}
	e := newEnv(t, envOptions{clock: clock, limits: server.Limits{FailedAuthBurst: 1000, FailedAuthRefill: time.Second},
		wrap: func(st store.Store) store.Store { counter.Store = st; return counter }})
	e.srv.BatchPolls()
	oldProxy := e.proxyClient()
	e.expireToken(clock)
	for i := range 50 {
		if _, err := pollNow(oldProxy, "a", 0); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("poll %d with the expired token: %v, want Unauthenticated", i, err)
		}
	}
	if single, batches := counter.counts(); single != 1 || batches != 0 {
		t.Errorf("50 polls with the expired token wrote %d records one by one and %d batches, want the first one only", single, batches)
	}
}

// TestAnUnclaimedUnitsTimeoutNamesTheInstanceOnAnExpiredToken: with the
// account's only instance polling with the token of before a rotation
// whose overlap ended, a unit that times out unclaimed says so, and what
// to do, rather than that no instance was online.
func TestAnUnclaimedUnitsTimeoutNamesTheInstanceOnAnExpiredToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	newToken, _ := crypto.NewToken("opt_")
	now := time.Now()
	if _, err := e.store.AccountRotate(context.Background(), store.AccountRotateParams{
		Name: e.account, TokenHash: crypto.HashToken(newToken), PreviousUntil: now.Add(-time.Minute), Now: now.Add(-time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	_, err := pollNow(e.proxyClient(), "a", 1)
	wantTokenExpiredRefusal(t, err)
	want := "no instance claimed it before the deadline: no instance of account acme was online (instance a polls but its account token expired: install the account's latest profile)"
	if got := executeUnclaimed(t, e); got != want {
		t.Errorf("reason %q\nwant %q", got, want)
	}
}
