package server_test

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// credentialTTL is the credential cache's ttl in these tests, shorter than
// `automator serve`'s (store.CredentialTTL): the server's cache and the
// one a withdrawal goes through (rotateToken, deleteAccount) share it, so
// a withdrawal still returns only once the server's copies expired, and
// what the tests check holds for any ttl; each withdrawal waits it out.
const credentialTTL = 100 * time.Millisecond

// cachedCredentials gives the server the credential cache `automator
// serve` runs with (but for its ttl, credentialTTL).
func cachedCredentials(st store.Store) store.Store {
	return store.CachedCredentials(st, credentialTTL)
}

// rotateToken gives the account a new token, the old one usable for
// overlap, the way `automator account rotate-token` does: from another
// process, through its own credential cache, returning once every
// automator's cached copy of the old token has expired. It returns a
// proxy client holding the new token.
func (e *env) rotateToken(overlap time.Duration) automatorv1.ProxyServiceClient {
	e.t.Helper()
	token, _ := crypto.NewToken("opt_")
	now := time.Now()
	if _, err := cachedCredentials(e.store).AccountRotate(context.Background(), store.AccountRotateParams{
		Name: e.account, TokenHash: crypto.HashToken(token), PreviousUntil: now.Add(overlap), Now: now,
	}); err != nil {
		e.t.Fatal(err)
	}
	return automatorv1.NewProxyServiceClient(e.conn(token))
}

// TestPollWaitingAcrossRotateTokenWithoutOverlapGetsNothing: a poll that
// was waiting, authenticated with the then current token, when
// `rotate-token --overlap 0` withdrew it is neither handed nor lets claim a
// unit queued after the rotation returned: it ends with Unauthenticated,
// as its next poll would be, and the refusal is audited. A poll with the
// new token gets the unit.
func TestPollWaitingAcrossRotateTokenWithoutOverlapGetsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Minute, wrap: cachedCredentials})
	oldProxy := e.proxyClient()
	old := pollAsync(t.Context(), oldProxy, "old", 1)
	e.awaitWaiting(1)

	newProxy := e.rotateToken(0)
	st := submit(t, e.callerClient(), e.account, time.Minute)
	r := waittest.Recv(t, old, "the poll waiting across rotate-token --overlap 0 to end")
	if len(r.resp.GetClaims()) > 0 {
		t.Fatalf("the poll waiting across rotate-token --overlap 0 got unit %s", r.resp.GetClaims()[0].GetWorkId())
	}
	if status.Code(r.err) != codes.Unauthenticated || !strings.Contains(r.err.Error(), "account token expired") {
		t.Fatalf("the poll waiting across rotate-token --overlap 0 ended with %v, want Unauthenticated: account token expired", r.err)
	}
	if _, err := pollNow(oldProxy, "old", 1); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the next poll with the withdrawn token: %v, want Unauthenticated", err)
	}
	if c := claimOne(t, newProxy, "new"); c.GetWorkId() != st.GetWorkId() {
		t.Fatalf("the poll with the new token claimed %s, want %s", c.GetWorkId(), st.GetWorkId())
	}
	var audited bool
	for _, ev := range e.auditLog() {
		if ev.Kind == store.AuditAuthFailed && ev.Actor == "account:acme" && strings.Contains(ev.Detail, "Poll: account token expired") {
			audited = true
		}
	}
	if !audited {
		t.Error("no auth.failed event records the waiting poll refused, naming its account")
	}
}

// TestPollWaitingAcrossRotateTokenWithOverlapStillTakesUnits: a token
// rotated with an overlap keeps working for a poll already waiting with
// it, as it does for a new one, until the overlap ends.
func TestPollWaitingAcrossRotateTokenWithOverlapStillTakesUnits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Minute, wrap: cachedCredentials})
	old := pollAsync(t.Context(), e.proxyClient(), "old", 1)
	e.awaitWaiting(1)

	e.rotateToken(time.Hour)
	st := submit(t, e.callerClient(), e.account, time.Minute)
	r := waittest.Recv(t, old, "the poll waiting across rotate-token --overlap 1h to answer with the unit")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("the poll waiting across rotate-token --overlap 1h: %v, %v; want unit %s", r.err, r.resp.GetClaims(), st.GetWorkId())
	}
}

// TestPollWithAWithdrawnTokenPassesItsWakeUpOn: the oldest waiting poll,
// whose token `rotate-token --overlap 0` withdrew, is woken by a unit
// queued (nothing tells the automator before it looks the token up
// again); it ends with Unauthenticated and passes the wake-up to the next
// poll, which claims the unit at once. The clock is injected.
func TestPollWithAWithdrawnTokenPassesItsWakeUpOn(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	gate := newClaimHeldAfter("new")
	e := newEnv(t, envOptions{pollWindow: time.Minute, clock: clock, pollWindowEnds: windowsNeverEnd,
		wrap: func(st store.Store) store.Store { gate.Store = st; return cachedCredentials(gate) }})
	old := pollAsync(t.Context(), e.proxyClient(), "old", 1)
	e.awaitWaiting(1)
	newProxy := e.rotateToken(0)
	clock.Advance(2 * time.Second) // the old poll's empty claim is stale: the new one claims

	st, polled := gate.announceWhileHeld(t, e, newProxy)
	if r := waittest.Recv(t, old, "the poll with the withdrawn token to end"); status.Code(r.err) != codes.Unauthenticated {
		t.Fatalf("the poll with the withdrawn token: %v, %v; want Unauthenticated", r.resp, r.err)
	}
	r := waittest.Recv(t, polled, "the poll with the new token to answer with the unit")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("the poll with the new token: %v, %v; want unit %s as it is queued", r.err, r.resp.GetClaims(), st.GetWorkId())
	}
}

// lookupHeld holds, once hold is set, each lookup of one token until
// release is closed, and tells entered.
type lookupHeld struct {
	store.Store
	hash    []byte
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *lookupHeld) AccountGetByToken(ctx context.Context, p store.AccountGetByTokenParams) (store.Account, error) {
	if g.hold.Load() && bytes.Equal(p.TokenHash, g.hash) {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Store.AccountGetByToken(ctx, p)
}

// TestPollWokenThatCannotTakePassesTheWakeUpOn: a waiting poll whose token
// was rotated (with an overlap) is woken by a unit queued, looks its token
// up again and finds, by the time it would claim, the overlap ended: it
// claims nothing and passes the wake-up to the next poll, which claims
// the unit at once. The clock is injected.
func TestPollWokenThatCannotTakePassesTheWakeUpOn(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	claims := newClaimHeldAfter("new")
	lookups := &lookupHeld{hash: crypto.HashToken(""), entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, envOptions{pollWindow: time.Minute, clock: clock, pollWindowEnds: windowsNeverEnd, wrap: func(st store.Store) store.Store {
		claims.Store = st
		lookups.Store = claims
		return cachedCredentials(lookups)
	}})
	lookups.hash = crypto.HashToken(e.token)
	pollAsync(t.Context(), e.proxyClient(), "old", 1)
	e.awaitWaiting(1)
	newProxy := e.rotateToken(time.Hour)
	clock.Advance(2 * time.Second) // the old poll's empty claim is stale: the new one claims

	claims.hold.Store(true)
	polled := pollAsync(t.Context(), newProxy, "new", 1)
	claims.held(t)
	lookups.hold.Store(true)
	st := submit(t, e.callerClient(), e.account, 3*time.Hour)
	if st.GetState() != automatorv1.State_STATE_QUEUED {
		t.Fatalf("the unit is %v by %q, want queued", st.GetState(), st.GetInstanceId())
	}
	waittest.Recv(t, lookups.entered, "the old poll, woken, to look its token up again")
	clock.Advance(2 * time.Hour) // before it claims, the overlap ends
	lookups.hold.Store(false)
	close(lookups.release)
	claims.hold.Store(false)
	close(claims.release)

	r := waittest.Recv(t, polled, "the poll with the new token to answer with the unit")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("the poll with the new token: %v, %v; want unit %s as it is queued", r.err, r.resp.GetClaims(), st.GetWorkId())
	}
}
