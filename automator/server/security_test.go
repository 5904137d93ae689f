package server_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// fakeClock is the automator's clock in tests that cross overlap windows
// without waiting for them.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// addAccount creates another account the way the CLI does.
func (e *env) addAccount(name string) (token string, key crypto.Key) {
	e.t.Helper()
	token, _ = crypto.NewToken("opt_")
	key, _ = crypto.NewKey(1)
	sealed, err := e.master.SealKey(name, key)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.AccountCreate(context.Background(), store.AccountCreateParams{Name: name, TokenHash: crypto.HashToken(token), KeyID: 1, SealedKey: sealed, Now: time.Now()}); err != nil {
		e.t.Fatal(err)
	}
	return token, key
}

// addAPIKey stores an API key with the given scope and returns its secret.
func (e *env) addAPIKey(id string, accounts ...string) string {
	e.t.Helper()
	secret, _ := crypto.NewToken("oak_")
	if _, err := e.store.APIKeyCreate(context.Background(), store.APIKeyCreateParams{ID: id, Hash: crypto.HashToken(secret), Name: id, Accounts: accounts, Now: time.Now()}); err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// rotateKey makes key id the account's current key, the old one usable
// until until, the way `automator account rotate-key` does.
func (e *env) rotateKey(account string, id uint32, now, until time.Time) crypto.Key {
	e.t.Helper()
	k, _ := crypto.NewKey(id)
	sealed, err := e.master.SealKey(account, k)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.AccountRotate(context.Background(), store.AccountRotateParams{Name: account, KeyID: id, SealedKey: sealed, PreviousUntil: until, Now: now}); err != nil {
		e.t.Fatal(err)
	}
	return k
}

// pollNow polls without waiting, as an instance holding keys keyIDs.
func pollNow(c automatorv1.ProxyServiceClient, instance string, max int, keyIDs ...uint32) (*automatorv1.PollResponse, error) {
	return c.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: instance, MaxUnits: int32(max), Wait: durationpb.New(0), KeyIds: keyIDs})
}

// claimOne polls until the instance claims one unit (the poll may race the
// enqueue's wake-up only in time, never in outcome: it waits for it).
func claimOne(t *testing.T, c automatorv1.ProxyServiceClient, instance string, keyIDs ...uint32) *automatorv1.Claim {
	t.Helper()
	resp, err := c.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: instance, MaxUnits: 1, KeyIds: keyIDs})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll by %s holding keys %v: %v, %d claims; want one", instance, keyIDs, err, len(resp.GetClaims()))
	}
	return resp.GetClaims()[0]
}

// openWith opens a claim's command with exactly the keys a proxy holds.
func openWith(t *testing.T, keys crypto.Keys, c *automatorv1.Claim) (*automatorv1.Command, uint32) {
	t.Helper()
	id, _ := crypto.BlobKeyID(c.GetSealedCommand())
	plain, err := crypto.Open(keys, c.GetAccount(), c.GetWorkId(), crypto.DirCommand, c.GetSealedCommand())
	if err != nil {
		t.Fatalf("a proxy holding keys %v cannot open the command of %s (sealed with key %d): %v", keys.IDs(), c.GetWorkId(), id, err)
	}
	var cmd automatorv1.Command
	if err := proto.Unmarshal(plain, &cmd); err != nil {
		t.Fatal(err)
	}
	return &cmd, id
}

// completeWith posts a result sealed, as a proxy does, with the key the
// claim's command was sealed with.
func completeWith(t *testing.T, c automatorv1.ProxyServiceClient, keys crypto.Keys, cl *automatorv1.Claim, stdout string) error {
	t.Helper()
	id, _ := crypto.BlobKeyID(cl.GetSealedCommand())
	k, ok := keys.Key(id)
	if !ok {
		t.Fatalf("no key %d to seal the result of %s", id, cl.GetWorkId())
	}
	plain, _ := proto.Marshal(&automatorv1.Result{Stdout: []byte(stdout)})
	sealed, err := crypto.Seal(k, cl.GetAccount(), cl.GetWorkId(), crypto.DirResult, plain)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), &automatorv1.CompleteRequest{
		WorkId: cl.GetWorkId(), ClaimId: cl.GetClaimId(), InstanceId: "x",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: sealed,
	})
	return err
}

func submitScript(t *testing.T, c automatorv1.AutomatorServiceClient, account, script string, timeout time.Duration) *automatorv1.WorkStatus {
	t.Helper()
	st, err := c.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: account, Command: &automatorv1.Command{Script: script}, Timeout: durationpb.New(timeout)})
	if err != nil {
		t.Fatalf("submit %s on %s: %v", script, account, err)
	}
	return st
}

func (e *env) auditLog() []store.AuditEvent {
	e.t.Helper()
	events, err := e.store.AuditList(context.Background(), store.AuditListParams{Limit: 10_000})
	if err != nil {
		e.t.Fatal(err)
	}
	return events
}

func countKind(events []store.AuditEvent, kind string) int {
	n := 0
	for _, e := range events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// TestPreviousTokenWorksUntilItsOverlapEndsThenIsRefused: after a token
// rotation both tokens authenticate the account until the overlap window
// ends; from then on the old one gets Unauthenticated saying it expired.
// The clock is injected: no waiting.
func TestPreviousTokenWorksUntilItsOverlapEndsThenIsRefused(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	oldProxy := e.proxyClient()
	if _, err := pollNow(oldProxy, "a", 0); err != nil {
		t.Fatalf("poll with the token before rotation: %v", err)
	}
	newToken, _ := crypto.NewToken("opt_")
	if _, err := e.store.AccountRotate(context.Background(), store.AccountRotateParams{
		Name: e.account, TokenHash: crypto.HashToken(newToken), PreviousUntil: clock.Now().Add(time.Hour), Now: clock.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	newProxy := automatorv1.NewProxyServiceClient(e.conn(newToken))

	clock.Advance(time.Hour - time.Second)
	for name, c := range map[string]automatorv1.ProxyServiceClient{"old token": oldProxy, "new token": newProxy} {
		if _, err := pollNow(c, "a", 0); err != nil {
			t.Errorf("poll with the %s inside the overlap window: %v, want it accepted", name, err)
		}
	}
	clock.Advance(time.Second)
	_, err := pollNow(oldProxy, "a", 0)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
		t.Errorf("poll with the old token at the end of the window: %v, want Unauthenticated saying it expired", err)
	}
	if _, err := pollNow(newProxy, "a", 0); err != nil {
		t.Errorf("poll with the new token after the window: %v", err)
	}
	// The refusal is audited with the account it belonged to, never the token.
	var found bool
	for _, ev := range e.auditLog() {
		if ev.Kind == store.AuditAuthFailed && ev.Actor == "account:acme" && strings.Contains(ev.Detail, "expired") {
			found = true
		}
		if strings.Contains(fmt.Sprintf("%+v", ev), e.token) {
			t.Errorf("audit event %+v holds the old token", ev)
		}
	}
	if !found {
		t.Errorf("no auth.failed event names the expired token's account")
	}
}

// TestRotateKeyKeepsUnitsRunningOnBothProfiles: after rotate-key, new units
// are sealed with the new key at rest; a unit claimed before the rotation
// completes with the old key; a unit queued before it runs on a proxy of
// the new profile; a proxy still on the old profile (holding only the old
// key) gets new units sealed for its key during the overlap window, and is
// refused (claiming nothing) after it, while the new profile's proxies get
// even old units sealed with a usable key.
func TestRotateKeyKeepsUnitsRunningOnBothProfiles(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	caller, proxy := e.callerClient(), e.proxyClient()
	oldKeys := crypto.Keys{e.key}

	inFlight := submitScript(t, caller, e.account, "in-flight.sh", 10*time.Hour)
	claimed := claimOne(t, proxy, "old", 1)
	if claimed.GetWorkId() != inFlight.GetWorkId() {
		t.Fatalf("claimed %s, want %s", claimed.GetWorkId(), inFlight.GetWorkId())
	}
	queuedBefore := submitScript(t, caller, e.account, "queued-before.sh", 10*time.Hour)

	newKey := e.rotateKey(e.account, 2, clock.Now(), clock.Now().Add(time.Hour))
	newKeys := crypto.Keys{newKey, e.key} // key and previous_keys of the new profile

	// The unit in flight: its result, sealed with key 1, is accepted.
	if err := completeWith(t, proxy, oldKeys, claimed, "in flight ok"); err != nil {
		t.Fatalf("result of the unit claimed before rotate-key: %v", err)
	}
	if st, _ := caller.Wait(waittest.Context(t, "Wait on the unit claimed before rotate-key to answer once its result was posted"), &automatorv1.WaitRequest{WorkId: inFlight.GetWorkId()}); string(st.GetResult().GetStdout()) != "in flight ok" {
		t.Fatalf("unit claimed before rotate-key: %v", st)
	}
	// The unit queued before: a new-profile proxy runs it, sealed as stored.
	c := claimOne(t, proxy, "new", 2, 1)
	if cmd, id := openWith(t, newKeys, c); cmd.GetScript() != "queued-before.sh" || id != 1 {
		t.Fatalf("unit queued before rotate-key reached the new profile as %q sealed with key %d, want queued-before.sh with key 1", cmd.GetScript(), id)
	}
	if err := completeWith(t, proxy, newKeys, c, "ok"); err != nil {
		t.Fatalf("result of the unit queued before rotate-key: %v", err)
	}
	_ = queuedBefore

	// New units are sealed with key 2 at rest...
	after := submitScript(t, caller, e.account, "after.sh", 10*time.Hour)
	w, err := e.store.WorkGet(context.Background(), after.GetWorkId())
	if id, _ := crypto.BlobKeyID(w.SealedCommand); err != nil || w.KeyID != 2 || id != 2 {
		t.Fatalf("unit queued after rotate-key stored with key id %d (blob %d), want 2", w.KeyID, id)
	}
	// ...and a proxy still on the old profile gets them sealed with key 1.
	c = claimOne(t, proxy, "old", 1)
	if cmd, id := openWith(t, oldKeys, c); cmd.GetScript() != "after.sh" || id != 1 {
		t.Fatalf("old-profile proxy got %q sealed with key %d, want after.sh sealed with key 1", cmd.GetScript(), id)
	}
	if err := completeWith(t, proxy, oldKeys, c, "old profile ok"); err != nil {
		t.Fatalf("old-profile proxy's result during the overlap: %v", err)
	}
	// A new-profile proxy gets them as stored, with key 2.
	submitScript(t, caller, e.account, "after-2.sh", 10*time.Hour)
	c = claimOne(t, proxy, "new", 2, 1)
	if _, id := openWith(t, newKeys, c); id != 2 {
		t.Fatalf("new-profile proxy got a command sealed with key %d, want 2", id)
	}
	if err := completeWith(t, proxy, newKeys, c, "ok"); err != nil {
		t.Fatal(err)
	}

	// After the overlap window the old key is no longer handed out.
	oldUnit := submitScript(t, caller, e.account, "late.sh", 10*time.Hour)
	clock.Advance(time.Hour)
	_, err = pollNow(proxy, "old", 1, 1)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "profile") {
		t.Fatalf("old-profile poll after the overlap: %v, want FailedPrecondition naming the new profile", err)
	}
	if st, _ := caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: oldUnit.GetWorkId()}); st.GetState() != automatorv1.State_STATE_QUEUED {
		t.Fatalf("the refused old-profile poll claimed a unit: %v", st.GetState())
	}
	c = claimOne(t, proxy, "new", 2, 1)
	if _, id := openWith(t, crypto.Keys{newKey}, c); id != 2 {
		t.Fatalf("after the overlap a unit went out sealed with key %d, want 2", id)
	}
}

// TestPreviousKeyUnitSealedAgainAfterOverlap: a unit sealed with the old
// key and still queued when the overlap ends goes out sealed with the new
// key, even to a proxy that holds both.
func TestPreviousKeyUnitSealedAgainAfterOverlap(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	caller, proxy := e.callerClient(), e.proxyClient()
	submitScript(t, caller, e.account, "old.sh", 10*time.Hour)
	newKey := e.rotateKey(e.account, 2, clock.Now(), clock.Now().Add(time.Minute))
	clock.Advance(time.Minute)
	c := claimOne(t, proxy, "new", 2, 1)
	if cmd, id := openWith(t, crypto.Keys{newKey}, c); id != 2 || cmd.GetScript() != "old.sh" {
		t.Fatalf("old unit after the overlap went out as %q sealed with key %d, want old.sh with key 2", cmd.GetScript(), id)
	}
	if err := completeWith(t, proxy, crypto.Keys{newKey}, c, "ok"); err != nil {
		t.Fatalf("result sealed with the new key for a unit stored under the old: %v", err)
	}
}

// TestPollPendingAcrossRotateKeyWithoutOverlapGetsNothing: a poll of the
// old profile that was already waiting when rotate-key --overlap 0 ran is
// not handed, and does not claim, a unit queued after it: the old key is
// never handed to a proxy again, however long that poll's window. A poll
// of the new profile gets the unit, sealed with the new key.
func TestPollPendingAcrossRotateKeyWithoutOverlapGetsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Minute})
	caller, proxy := e.callerClient(), e.proxyClient()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	old := make(chan pollResult, 1)
	go func() {
		resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "old", MaxUnits: 1, KeyIds: []uint32{1}, Wait: durationpb.New(time.Minute)})
		old <- pollResult{resp, err}
	}()
	e.awaitWaiting(1)

	now := time.Now()
	newKey := e.rotateKey(e.account, 2, now, now) // --overlap 0
	st := submitScript(t, caller, e.account, "after.sh", time.Minute)

	resp, err := proxy.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "new", MaxUnits: 1, KeyIds: []uint32{2}, Wait: durationpb.New(10 * time.Second)})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll of the new profile: %v, %d claims; want the unit queued after rotate-key", err, len(resp.GetClaims()))
	}
	if cmd, id := openWith(t, crypto.Keys{newKey}, resp.GetClaims()[0]); cmd.GetScript() != "after.sh" || id != 2 {
		t.Fatalf("new profile got %q sealed with key %d, want after.sh with key 2", cmd.GetScript(), id)
	}
	cancel()
	if r := waittest.Recv(t, old, "the poll pending across rotate-key --overlap 0 to end once cancelled"); len(r.resp.GetClaims()) > 0 {
		t.Fatalf("the poll pending across rotate-key --overlap 0 got unit %s (queued as %s) sealed for the withdrawn key", r.resp.GetClaims()[0].GetWorkId(), st.GetWorkId())
	}
}

// TestAPollAfterRotateKeyWithoutOverlapIsRefusedAtOnce: the first poll
// after rotate-key --overlap 0 of a proxy holding only the withdrawn key is
// refused (FailedPrecondition, recorded as refused), though the account's
// keys were read for an earlier poll less than 30 s before: the token's
// lookup reads the account's current key id, and one the keys read
// lack is a rotation made since. It used to be accepted until those keys
// were 30 s old, listed online, and a unit no instance could take timed
// out saying an instance was online.
func TestAPollAfterRotateKeyWithoutOverlapIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	proxy := e.proxyClient()
	if _, err := pollNow(proxy, "old", 1, 1); err != nil {
		t.Fatalf("poll holding the account's key: %v", err)
	}
	now := time.Now()
	e.rotateKey(e.account, 2, now, now) // --overlap 0
	_, err := pollNow(proxy, "old", 1, 1)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "none of them usable now") {
		t.Fatalf("poll holding only the key withdrawn by rotate-key --overlap 0: %v; want FailedPrecondition, none of its keys usable now", err)
	}
	if _, err := pollNow(proxy, "new", 1, 2); err != nil {
		t.Fatalf("poll holding the new key: %v", err)
	}
}

// TestRevokedAPIKeyIsRefusedAtOnce: the very next call with a revoked key,
// on the same connection, is refused.
func TestRevokedAPIKeyIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	secret := e.addAPIKey("ak_ci")
	c := automatorv1.NewAutomatorServiceClient(e.conn(secret))
	st := submitScript(t, c, e.account, "x.sh", time.Minute)
	if _, err := e.store.APIKeyRevoke(context.Background(), store.APIKeyRevokeParams{ID: "ak_ci", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("submit right after the revoke: %v, want Unauthenticated saying the key was revoked", err)
	}
	if _, err := c.Get(context.Background(), &automatorv1.GetRequest{WorkId: st.GetWorkId()}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("get right after the revoke: %v, want Unauthenticated", err)
	}
	submitScript(t, e.callerClient(), e.account, "x.sh", time.Minute) // other keys still work
}

// TestScopedAPIKeyCannotUseOtherAccounts: a key scoped to acme executes on
// acme, and gets PermissionDenied for every call naming globex: submit,
// execute, instances. An account that does not exist is refused the same
// way: the key learns nothing of which accounts exist. A unit of globex
// (get, wait, cancel) is answered NotFound in the words an unknown id
// gets, naming no account: the key learns nothing from the id of another
// account's unit either. Every refusal is audited.
func TestScopedAPIKeyCannotUseOtherAccounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.addAccount("globex")
	scoped := automatorv1.NewAutomatorServiceClient(e.conn(e.addAPIKey("ak_acme", "acme")))
	// Bounded, so that a call wrongly allowed (a wait) fails the test
	// instead of blocking it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	submitScript(t, scoped, "acme", "x.sh", time.Minute)
	theirs := submitScript(t, e.callerClient(), "globex", "x.sh", time.Minute)

	denied := map[string]func() error{
		"Submit": func() error {
			_, err := scoped.Submit(ctx, &automatorv1.ExecuteRequest{Account: "globex", Command: &automatorv1.Command{Script: "x.sh"}})
			return err
		},
		"ExecuteOnProxy": func() error {
			_, err := scoped.ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: "globex", Command: &automatorv1.Command{Script: "x.sh"}})
			return err
		},
		"Get": func() error {
			_, err := scoped.Get(ctx, &automatorv1.GetRequest{WorkId: theirs.GetWorkId()})
			return err
		},
		"Wait": func() error {
			_, err := scoped.Wait(ctx, &automatorv1.WaitRequest{WorkId: theirs.GetWorkId()})
			return err
		},
		"Cancel": func() error {
			_, err := scoped.Cancel(ctx, &automatorv1.CancelRequest{WorkId: theirs.GetWorkId()})
			return err
		},
		"ListInstances": func() error {
			_, err := scoped.ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: "globex"})
			return err
		},
	}
	const unknownID = "w_0123456789abcdef0123456789abcdef"
	for method, call := range denied {
		err := call()
		switch method {
		case "Get", "Wait", "Cancel":
			want := strings.ReplaceAll(status.Convert(err).Message(), theirs.GetWorkId(), unknownID)
			_, unknown := scoped.Get(ctx, &automatorv1.GetRequest{WorkId: unknownID})
			if status.Code(err) != codes.NotFound || want != status.Convert(unknown).Message() || strings.Contains(err.Error(), "globex") {
				t.Errorf("%s of globex's unit with a key scoped to acme: %v; want NotFound in the words an unknown id gets (%v)", method, err, unknown)
			}
		default:
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "globex") {
				t.Errorf("%s on globex with a key scoped to acme: %v, want PermissionDenied naming globex", method, err)
			}
		}
	}
	unknown := map[string]func() error{
		"Submit": func() error {
			_, err := scoped.Submit(ctx, &automatorv1.ExecuteRequest{Account: "initech", Command: &automatorv1.Command{Script: "x.sh"}})
			return err
		},
		"ExecuteOnProxy": func() error {
			_, err := scoped.ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: "initech", Command: &automatorv1.Command{Script: "x.sh"}})
			return err
		},
		"ListInstances": func() error {
			_, err := scoped.ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: "initech"})
			return err
		},
	}
	for method, call := range unknown {
		if err := call(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "initech") {
			t.Errorf("%s on initech, which does not exist, with a key scoped to acme: %v, want PermissionDenied naming initech", method, err)
		}
	}
	if st, _ := e.callerClient().Get(ctx, &automatorv1.GetRequest{WorkId: theirs.GetWorkId()}); st.GetState() != automatorv1.State_STATE_QUEUED {
		t.Errorf("globex's unit is %v after the denied cancel, want still queued", st.GetState())
	}
	if n := countKind(e.auditLog(), store.AuditAuthDenied); n != len(denied)+len(unknown) {
		t.Errorf("audit log holds %d auth.denied events, want %d", n, len(denied)+len(unknown))
	}
}

// TestFailedAuthIsRateLimitedWithoutLockingOutAHealthyProxy: a source that
// spends its budget of failed authentications gets ResourceExhausted for
// further failures, while calls with valid credentials from the very same
// address (a healthy proxy or caller behind the same NAT) keep working.
// Only the failures within the budget, and the first refusal, are audited.
func TestFailedAuthIsRateLimitedWithoutLockingOutAHealthyProxy(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, limits: server.Limits{FailedAuthBurst: 3, FailedAuthRefill: time.Minute}})
	bad := automatorv1.NewProxyServiceClient(e.conn("opt_wrong"))
	good := e.proxyClient()
	for i := range 3 {
		if _, err := pollNow(bad, "bad", 1); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("failed attempt %d within the budget: %v, want Unauthenticated", i+1, err)
		}
	}
	for i := range 3 {
		_, err := pollNow(bad, "bad", 1)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "too many failed authentications") {
			t.Fatalf("failed attempt %d over the budget: %v, want ResourceExhausted", 4+i, err)
		}
	}
	// Same address (127.0.0.1), valid credentials: never limited.
	for range 10 {
		if _, err := pollNow(good, "good", 0); err != nil {
			t.Fatalf("poll with the valid token from the limited address: %v", err)
		}
	}
	submitScript(t, e.callerClient(), e.account, "x.sh", time.Minute)
	_, err := automatorv1.NewAutomatorServiceClient(e.conn("oak_wrong")).Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x"}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a wrong API key from the limited address: %v, want ResourceExhausted", err)
	}
	// The budget comes back with time.
	clock.Advance(time.Minute)
	if _, err := pollNow(bad, "bad", 1); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("failed attempt after a refill: %v, want Unauthenticated", err)
	}
	events := e.auditLog()
	if failed, limited := countKind(events, store.AuditAuthFailed), countKind(events, store.AuditAuthRateLimited); failed != 4 || limited != 1 {
		t.Errorf("audit log: %d auth.failed and %d auth.rate_limited events; want 4 (3 + 1 after the refill) and 1", failed, limited)
	}
	for _, ev := range events {
		if (ev.Kind == store.AuditAuthFailed || ev.Kind == store.AuditAuthRateLimited) && ev.Source != "127.0.0.1" {
			t.Errorf("%s event has source %q, want 127.0.0.1", ev.Kind, ev.Source)
		}
	}
}

// TestQueueCapRefusesWithResourceExhaustedAndOthersServed: an account with
// max_queued_per_account units queued refuses more with a clear
// ResourceExhausted, other accounts are served, and once a unit is claimed
// the account accepts units again.
func TestQueueCapRefusesWithResourceExhaustedAndOthersServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{limits: server.Limits{MaxQueuedPerAccount: 3}})
	e.addAccount("globex")
	caller := e.callerClient()
	for range 3 {
		submitScript(t, caller, "acme", "x.sh", time.Minute)
	}
	_, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh"}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_queued_per_account") || !strings.Contains(err.Error(), `"acme"`) {
		t.Fatalf("4th unit on acme: %v, want ResourceExhausted naming the account and max_queued_per_account", err)
	}
	submitScript(t, caller, "globex", "x.sh", time.Minute)
	claimOne(t, e.proxyClient(), "a", 1)
	submitScript(t, caller, "acme", "x.sh", time.Minute)
	if n := countKind(e.auditLog(), store.AuditWorkRefused); n != 1 {
		t.Errorf("audit log holds %d work.refused events, want 1", n)
	}
}

// TestConfiguredCommandLimitsNameTheirSetting: each command limit, set low,
// refuses with InvalidArgument naming the field, the limit and its setting
// in automator.yaml; the automator keeps serving.
func TestConfiguredCommandLimitsNameTheirSetting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{limits: server.Limits{MaxScriptName: 8, MaxArgs: 2, MaxArgsBytes: 10, MaxEnv: 1, MaxEnvBytes: 10, MaxStdin: 16}})
	caller := e.callerClient()
	for setting, cmd := range map[string]*automatorv1.Command{
		"max_script_name": {Script: "longer-than-8.sh"},
		"max_args":        {Script: "x", Args: []string{"a", "b", "c"}},
		"max_args_bytes":  {Script: "x", Args: []string{"0123456789a"}},
		"max_env":         {Script: "x", Env: map[string]string{"A": "1", "B": "2"}},
		"max_env_bytes":   {Script: "x", Env: map[string]string{"A": "0123456789"}},
		"max_stdin":       {Script: "x", Stdin: make([]byte, 17)},
	} {
		_, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: cmd})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limits."+setting) || !strings.Contains(err.Error(), "limit of") {
			t.Errorf("command over %s: %v, want InvalidArgument naming limits.%s", setting, err, setting)
		}
	}
	submitScript(t, caller, e.account, "ok.sh", time.Minute)
}

// TestACommandAtEveryLimitIsAccepted: each limit is the largest size
// accepted, not the smallest refused.
func TestACommandAtEveryLimitIsAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{limits: server.Limits{MaxScriptName: 8, MaxArgs: 2, MaxArgsBytes: 10, MaxEnv: 1, MaxEnvBytes: 10, MaxStdin: 16}})
	_, err := e.callerClient().Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{
		Script: "eight.sh",
		Args:   []string{"01234", "56789"},
		Env:    map[string]string{"A": "012345678"},
		Stdin:  make([]byte, 16),
	}})
	if err != nil {
		t.Fatalf("a command at every limit: %v, want it queued", err)
	}
}

// TestAnArgumentNoProxyCouldPassIsRefused: one argument, or one variable
// as NAME=VALUE, of more than 128 KiB less one byte is more than any proxy
// passes to a script (Linux's MAX_ARG_STRLEN, its NUL included; windows
// takes less in its whole command line), though within max_args_bytes or
// max_env_bytes: refused with InvalidArgument naming it and stdin, rather
// than queued to fail on the proxy (a review); one at that size is queued.
func TestAnArgumentNoProxyCouldPassIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{limits: server.Limits{MaxEnvBytes: 1 << 20}})
	caller := e.callerClient()
	const most = 128<<10 - 1
	for _, tc := range []struct {
		cmd  *automatorv1.Command
		says string
	}{
		{&automatorv1.Command{Script: "x", Args: []string{"a", strings.Repeat("b", most+1)}}, "command.args[1] is 131072 bytes, more than one argument may be (131071"},
		{&automatorv1.Command{Script: "x", Env: map[string]string{"BIG": strings.Repeat("v", most-3)}}, `command.env "BIG" is 131072 bytes with its name, more than one variable may be`},
	} {
		_, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: tc.cmd})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "stdin") {
			t.Errorf("a command with one part too large for any proxy: %v; want InvalidArgument saying %q", err, tc.says)
		}
	}
	for _, cmd := range []*automatorv1.Command{
		{Script: "x", Args: []string{strings.Repeat("b", most)}},
		{Script: "x", Env: map[string]string{"BIG": strings.Repeat("v", most-4)}},
	} {
		if _, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: cmd}); err != nil {
			t.Errorf("a command with one part of 131071 bytes: %v; want it queued", err)
		}
	}
}

// TestReplayedResultDirectionIsRefused: a command blob posted back as the
// unit's result (same account, work id and key: only the direction
// differs) does not open, and the claim stays intact.
func TestReplayedResultDirectionIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	proxy := e.proxyClient()
	submitScript(t, e.callerClient(), e.account, "x.sh", time.Minute)
	c := claimOne(t, proxy, "a", 1)
	_, err := proxy.Complete(context.Background(), &automatorv1.CompleteRequest{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: c.GetSealedCommand(),
	})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "did not open") {
		t.Fatalf("the command posted as the result: %v, want InvalidArgument saying it did not open", err)
	}
	if err := completeWith(t, proxy, crypto.Keys{e.key}, c, "ok"); err != nil {
		t.Fatalf("the genuine result after the replay: %v", err)
	}
}

// TestAuditLogRecordsCallsWithoutSecrets: queued and ended units, refusals
// and auth failures are in the audit log with who, from where and what;
// nothing in it holds a token, an API key, the account key, an argument,
// stdin, env or output, and the script name is there only sealed.
func TestAuditLogRecordsCallsWithoutSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	caller, proxy := e.callerClient(), e.proxyClient()
	const script = "SCRIPT-CANARY.sh"
	st, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{
		Script: script, Args: []string{"ARG-CANARY"}, Stdin: []byte("STDIN-CANARY"), Env: map[string]string{"ENV_CANARY": "ENV-VALUE-CANARY"},
	}, IdempotencyKey: "IDEMPOTENCY-CANARY"})
	if err != nil {
		t.Fatal(err)
	}
	c := claimOne(t, proxy, "host-a", 1)
	if err := completeWith(t, proxy, crypto.Keys{e.key}, c, "OUTPUT-CANARY"); err != nil {
		t.Fatal(err)
	}
	cancelled := submitScript(t, caller, e.account, "other.sh", time.Minute)
	if _, err := caller.Cancel(ctx, &automatorv1.CancelRequest{WorkId: cancelled.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	automatorv1.NewProxyServiceClient(e.conn("opt_WRONG-TOKEN-CANARY")).Poll(ctx, &automatorv1.PollRequest{InstanceId: "x"})
	automatorv1.NewAutomatorServiceClient(e.conn("oak_WRONG-KEY-CANARY")).Get(ctx, &automatorv1.GetRequest{WorkId: "w"})

	events := e.auditLog()
	want := []struct {
		kind, actor, workID, outcome, instance string
	}{
		{store.AuditWorkQueued, "apikey:admin", st.GetWorkId(), "", ""},
		{store.AuditWorkEnded, "account:acme", st.GetWorkId(), "succeeded", "host-a"},
		{store.AuditWorkQueued, "apikey:admin", cancelled.GetWorkId(), "", ""},
		{store.AuditWorkEnded, "apikey:admin", cancelled.GetWorkId(), "cancelled", ""},
		{store.AuditAuthFailed, "", "", "", ""},
		{store.AuditAuthFailed, "", "", "", ""},
	}
	if len(events) != len(want) {
		t.Fatalf("audit log holds %d events, want %d: %+v", len(events), len(want), events)
	}
	for i, w := range want {
		ev := events[i]
		if ev.Kind != w.kind || ev.Actor != w.actor || ev.WorkID != w.workID || ev.Outcome != w.outcome || ev.InstanceID != w.instance || ev.Source != "127.0.0.1" {
			t.Errorf("audit event %d = %+v, want %+v from 127.0.0.1", i, ev, w)
		}
	}
	if name, err := e.master.OpenAuditField(st.GetWorkId(), events[0].SealedScript); err != nil || string(name) != script {
		t.Errorf("the queued event's sealed script opens to %q, %v; want %q", name, err, script)
	}
	all := fmt.Sprintf("%+v", events)
	secrets := map[string]string{
		"account token": e.token, "admin API key": e.apiKey, "account key": e.key.String(),
		"argument": "ARG-CANARY", "stdin": "STDIN-CANARY", "env": "ENV-VALUE-CANARY", "env name": "ENV_CANARY",
		"output": "OUTPUT-CANARY", "idempotency key": "IDEMPOTENCY-CANARY", "script name": "SCRIPT-CANARY",
		"wrong token": "WRONG-TOKEN-CANARY", "wrong API key": "WRONG-KEY-CANARY",
	}
	for what, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("the audit log holds the %s", what)
		}
	}
	for _, ev := range events {
		if bytes.Contains(ev.SealedScript, []byte("CANARY")) {
			t.Errorf("a sealed script holds the name in plaintext")
		}
	}
}

// TestPollWithAPreviousTokenEndsWithItsWindow: a long poll authenticated
// with a previous token returns, having claimed nothing, when the token's
// overlap window ends, though its poll window is longer; the next poll is
// refused.
//
// The clock is injected and stands still until the test moves it: the poll
// is inside the overlap however long it takes to arrive, and its window is
// what is left of the overlap then, which its answer states.
func TestPollWithAPreviousTokenEndsWithItsWindow(t *testing.T) {
	t.Parallel()
	const overlap = 500 * time.Millisecond
	clock := newFakeClock()
	e := newEnv(t, envOptions{pollWindow: time.Hour, clock: clock})
	oldProxy := e.proxyClient()
	newToken, _ := crypto.NewToken("opt_")
	if _, err := e.store.AccountRotate(context.Background(), store.AccountRotateParams{
		Name: e.account, TokenHash: crypto.HashToken(newToken), PreviousUntil: clock.Now().Add(overlap), Now: clock.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	// The overlap's end as stored, to the store's precision.
	old, err := e.store.AccountGetByToken(context.Background(), store.AccountGetByTokenParams{TokenHash: crypto.HashToken(e.token), Now: clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	left := old.PreviousTokenUntil.Sub(clock.Now())
	if left <= 0 || left > overlap {
		t.Fatalf("the stored overlap ends %v from now, want within (0, %v]", left, overlap)
	}
	// Its poll window (a minute, as asked) is far longer than the bound
	// the test waits for the answer.
	r := waittest.Recv(t, pollAsync(t.Context(), oldProxy, "old", 1), "the poll with the previous token to end with the token's overlap window")
	if r.err != nil || len(r.resp.GetClaims()) != 0 {
		t.Fatalf("poll with the previous token: %v, %d claims; want an empty answer", r.err, len(r.resp.GetClaims()))
	}
	if got := r.resp.GetWait().AsDuration(); got != left {
		t.Fatalf("the poll with the previous token waited %v, want what was left of the token's overlap window, %v", got, left)
	}
	clock.Advance(overlap)
	submitScript(t, e.callerClient(), e.account, "x.sh", time.Minute)
	if _, err := pollNow(oldProxy, "old", 1); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("poll with the expired token: %v, want Unauthenticated", err)
	}
	claimOne(t, automatorv1.NewProxyServiceClient(e.conn(newToken)), "new")
}
