package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// deleteAccount deletes an account the way `automator account delete`
// does: from another process, through its own credential cache, returning
// once every automator's cached copy of its credentials has expired.
func (e *env) deleteAccount(name string) store.AccountDeletion {
	e.t.Helper()
	now := time.Now()
	d, err := cachedCredentials(e.store).AccountDelete(context.Background(), store.AccountDeleteParams{
		Name: name, Reason: "account " + name + " was deleted", Now: now,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

type waitResult struct {
	st  *automatorv1.WorkStatus
	err error
}

func waitAsync(c automatorv1.AutomatorServiceClient, id string) <-chan waitResult {
	out := make(chan waitResult, 1)
	go func() {
		st, err := c.Wait(context.Background(), &automatorv1.WaitRequest{WorkId: id})
		out <- waitResult{st, err}
	}()
	return out
}

// TestAccountDeletionEndsItsWaitingPollsAndCallersAtOnce: polls of the
// account waiting when it is deleted end with Unauthenticated, and callers
// waiting for its queued and claimed units get them cancelled, saying why,
// long before the poll window or the units' deadlines; the claimer's
// result is refused afterwards.
func TestAccountDeletionEndsItsWaitingPollsAndCallersAtOnce(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	e := newEnv(t, envOptions{pollWindow: time.Hour, wrap: cachedCredentials, sweepInterval: 20 * time.Millisecond, metrics: m})
	px, caller := e.proxyClient(), e.callerClient()
	claimedSt := submit(t, caller, e.account, time.Hour)
	claim := claimOne(t, px, "host-a")
	queuedSt := submit(t, caller, e.account, time.Hour)
	waitClaimed, waitQueued := waitAsync(caller, claimedSt.GetWorkId()), waitAsync(caller, queuedSt.GetWorkId())
	// Both wait before the deletion (one arriving after it would only read
	// its unit cancelled).
	waittest.Until(t, "both callers to wait for their units", func() bool { return waitsOpen(t, m, "acme") == 2 })
	// A poll that waits to hear of cancels only, so it does not take the
	// queued unit.
	polled := pollAsync(t.Context(), px, "host-b", 0)
	e.awaitWaiting(1)

	e.deleteAccount(e.account)

	r := waittest.Recv(t, polled, "the poll waiting when its account was deleted to end")
	if status.Code(r.err) != codes.Unauthenticated {
		t.Errorf("the poll waiting when its account was deleted: %v, %v; want Unauthenticated", r.resp, r.err)
	}
	for _, w := range []<-chan waitResult{waitClaimed, waitQueued} {
		got := waittest.Recv(t, w, "a caller waiting for a unit of the deleted account to be answered")
		if got.err != nil || got.st.GetState() != automatorv1.State_STATE_CANCELLED || got.st.GetReason() != `account acme was deleted` {
			t.Errorf("a caller waiting for a unit of the deleted account: %v, %v; want cancelled, \"account acme was deleted\"", got.st, got.err)
		}
	}
	_, err := px.Complete(context.Background(), &automatorv1.CompleteRequest{
		WorkId: claim.GetWorkId(), ClaimId: claim.GetClaimId(), InstanceId: "host-a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(claim.GetWorkId(), &automatorv1.Result{}),
	})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("the claimer's result after its account was deleted: %v; want Unauthenticated", err)
	}
	if _, err := pollNow(px, "host-a", 1); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a poll after its account was deleted: %v; want Unauthenticated", err)
	}
}

// TestDeletedAccountIsUnknownToCallers: after the deletion, submits name
// an account that does not exist, in the words used for one that never
// did; a key that could use it among others no longer may (PermissionDenied,
// as for any account outside its scope); a key that could use only it is
// revoked. Its ended units stay readable as far as their state, but a
// result sealed with its destroyed key is refused, saying why.
func TestDeletedAccountIsUnknownToCallers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Second, wrap: cachedCredentials})
	e.addAccount("globex")
	both := e.addAPIKey("k-both", "acme", "globex")
	only := e.addAPIKey("k-only", "acme")
	px, caller := e.proxyClient(), e.callerClient()
	done := submit(t, caller, e.account, time.Hour)
	e.completeClaim(px, "host-a", claimOne(t, px, "host-a"))

	d := e.deleteAccount(e.account)
	if len(d.RevokedAPIKeys) != 1 || len(d.NarrowedAPIKeys) != 1 {
		t.Fatalf("AccountDelete revoked %v and narrowed %v; want k-only and k-both", d.RevokedAPIKeys, d.NarrowedAPIKeys)
	}

	_, errDeleted := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh"}})
	_, errNever := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "nobody", Command: &automatorv1.Command{Script: "x.sh"}})
	if status.Code(errDeleted) != codes.NotFound || status.Convert(errDeleted).Message() != strings.ReplaceAll(status.Convert(errNever).Message(), "nobody", "acme") {
		t.Errorf("Submit on the deleted account: %v; want NotFound as for an account that never existed (%v)", errDeleted, errNever)
	}
	_, err := caller.ExecuteOnProxy(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh"}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("ExecuteOnProxy on the deleted account: %v; want NotFound", err)
	}
	bothClient := automatorv1.NewAutomatorServiceClient(e.conn(both))
	_, err = bothClient.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Submit on the deleted account with a key that could use it and globex: %v; want PermissionDenied", err)
	}
	if _, err := bothClient.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "globex", Command: &automatorv1.Command{Script: "x.sh"}}); err != nil {
		t.Errorf("Submit on globex with that key: %v; want it still allowed", err)
	}
	_, err = automatorv1.NewAutomatorServiceClient(e.conn(only)).Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh"}})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("Submit with the key that could use only the deleted account: %v; want Unauthenticated, revoked", err)
	}

	_, err = caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: done.GetWorkId()})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `account "acme"`) || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("Get of a unit of the deleted account with a result: %v; want FailedPrecondition saying its account was deleted", err)
	}
}

// TestAccountCreatedAgainIsSealedWithItsOwnKey: an automator that cached
// the keys of an account before it was deleted (and has not looked for
// deletions since) seals the units of the account created again under the
// same name with the new key, and hands them to its new proxies, which hold
// that key only (key id 1, which the old account had rotated out); and no
// blob of the old account opens with the new key.
func TestAccountCreatedAgainIsSealedWithItsOwnKey(t *testing.T) {
	t.Parallel()
	// The automator looks for deletions once, as it starts, then not for
	// an hour: only the units' own account reads can tell it.
	e := newEnv(t, envOptions{pollWindow: time.Second, wrap: cachedCredentials, sweepInterval: time.Hour})
	px, caller := e.proxyClient(), e.callerClient()
	// The old account's key 1 was rotated out, with no overlap, for key 2.
	now := time.Now()
	e.rotateKey(e.account, 2, now, now)
	old := submit(t, caller, e.account, time.Hour)
	claimOne(t, px, "host-a", 2) // the automator holds acme's keys now

	e.deleteAccount(e.account)
	oldWork, err := e.store.WorkGet(context.Background(), old.GetWorkId())
	if err != nil {
		t.Fatal(err)
	}
	token, key := e.addAccount(e.account)
	newProxy := automatorv1.NewProxyServiceClient(e.conn(token))
	if _, err := pollNow(newProxy, "host-new", 1, 1); err != nil {
		t.Fatalf("the new account's first poll, before any unit: %v", err)
	}
	fresh := submit(t, caller, e.account, time.Hour)
	c := claimOne(t, newProxy, "host-new", 1)
	if c.GetWorkId() != fresh.GetWorkId() {
		t.Fatalf("the new account's proxy claimed %s, want %s", c.GetWorkId(), fresh.GetWorkId())
	}
	if _, err := crypto.Open(crypto.Keys{key}, c.GetAccount(), c.GetWorkId(), crypto.DirCommand, c.GetSealedCommand()); err != nil {
		t.Fatalf("the new account's unit does not open with its key: %v", err)
	}
	if _, err := crypto.Open(crypto.Keys{e.key}, c.GetAccount(), c.GetWorkId(), crypto.DirCommand, c.GetSealedCommand()); err == nil {
		t.Error("the new account's unit opens with the deleted account's key")
	}
	for _, account := range []string{"acme", oldWork.Account} {
		if _, err := crypto.Open(crypto.Keys{key}, account, oldWork.ID, crypto.DirCommand, oldWork.SealedCommand); err == nil {
			t.Errorf("the deleted account's unit opens with the new account's key (as account %q)", account)
		}
	}
	var cmd automatorv1.Command
	plain, _ := crypto.Open(crypto.Keys{key}, c.GetAccount(), c.GetWorkId(), crypto.DirCommand, c.GetSealedCommand())
	if err := proto.Unmarshal(plain, &cmd); err != nil || cmd.GetScript() != "x.sh" {
		t.Errorf("the new account's command = %v, %v; want x.sh", &cmd, err)
	}
	// The automator's own opening of the old unit says why it cannot.
	if _, err := e.srv.OpenCommand(context.Background(), oldWork); !errors.Is(err, server.ErrAccountDeleted) {
		t.Errorf("OpenCommand of the deleted account's unit: %v; want ErrAccountDeleted", err)
	}
}

// pollWaitingWithARunningUnit starts an automator whose instance host-a
// runs a unit of the account (claim) and waits in a poll for no units,
// saying so; polled gets that poll's answer.
func pollWaitingWithARunningUnit(t *testing.T) (e *env, px automatorv1.ProxyServiceClient, claim *automatorv1.Claim, polled chan pollResult) {
	t.Helper()
	e = newEnv(t, envOptions{pollWindow: time.Hour, wrap: cachedCredentials, sweepInterval: 20 * time.Millisecond})
	px, caller := e.proxyClient(), e.callerClient()
	submit(t, caller, e.account, time.Hour)
	claim = claimOne(t, px, "host-a")
	polled = make(chan pollResult, 1)
	go func() {
		resp, err := px.Poll(t.Context(), &automatorv1.PollRequest{
			InstanceId: "host-a", MaxUnits: 0, Running: []string{claim.GetWorkId()}, Wait: durationpb.New(time.Minute),
		})
		polled <- pollResult{resp, err}
	}()
	e.awaitWaiting(1)
	return e, px, claim, polled
}

// TestAccountDeletionTellsItsWaitingPollsWhatToKill: the units an instance
// runs when its account is deleted are cancelled by the deletion; its
// waiting poll, woken, answers them as cancelled (so the proxy kills their
// scripts, as for any cancel) rather than failing with nothing said, and
// only its next poll is refused.
func TestAccountDeletionTellsItsWaitingPollsWhatToKill(t *testing.T) {
	t.Parallel()
	e, px, claim, polled := pollWaitingWithARunningUnit(t)

	e.deleteAccount(e.account)

	r := waittest.Recv(t, polled, "the poll waiting when its account was deleted to end")
	if r.err != nil || len(r.resp.GetCancelled()) != 1 || r.resp.GetCancelled()[0] != claim.GetWorkId() {
		t.Errorf("the poll of an instance running %s when its account was deleted: %v, %v; want it answered with that unit cancelled", claim.GetWorkId(), r.resp, r.err)
	}
	if _, err := pollNow(px, "host-a", 1); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the next poll: %v; want Unauthenticated", err)
	}
}

// silentUnits is a store whose listing of the units of account's
// tombstone gets no answer: it returns only when its context ends, as on a
// connection to a database cut off without a word. listed is closed at
// the first such listing.
type silentUnits struct {
	store.Store
	account string
	listed  chan struct{}
	once    sync.Once
}

func (s *silentUnits) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	if name, ok := store.DeletedAccount(p.Account); ok && name == s.account {
		s.once.Do(func() { close(s.listed) })
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.WorkList(ctx, p)
}

// TestADeletionWhoseUnitsGetNoAnswerDoesNotStopTheWatch: the watch for
// deleted accounts gives up a listing of a deleted account's units that
// gets no answer after SweepTimeout, as it does its look for deletions,
// and goes on acting on the deletions that follow, rather than wait for
// the operating system to give the connection up. SweepTimeout passes
// when the test says, once the listing waits: the store calls that do get
// an answer are never given up, however slow the machine.
func TestADeletionWhoseUnitsGetNoAnswerDoesNotStopTheWatch(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	silent := &silentUnits{account: "globex", listed: make(chan struct{})}
	timeouts := &sweepTimeouts{}
	e := newEnv(t, envOptions{log: log, sweepInterval: 20 * time.Millisecond, sweepTimeouts: timeouts,
		wrap: func(st store.Store) store.Store { silent.Store = cachedCredentials(st); return silent }})
	e.addAccount("globex")
	e.deleteAccount("globex")
	waittest.Recv(t, silent.listed, "the watch to list the units of globex")
	timeouts.pass()
	e.deleteAccount(e.account)
	waittest.Until(t, "the automator to act on acme's deletion after globex's", func() bool {
		return len(log.lines("account deleted", "account="+e.account+" ")) > 0
	})
}

// staleAccounts answers AccountGet of the accounts it holds with the copy
// it holds, as an automator's credential cache does for up to a second
// after the account was deleted in another process.
type staleAccounts struct {
	store.Store
	mu   sync.Mutex
	held map[string]store.Account
}

func (s *staleAccounts) hold(t *testing.T, name string) {
	t.Helper()
	a, err := s.Store.AccountGet(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[name] = a
}

func (s *staleAccounts) AccountGet(ctx context.Context, name string) (store.Account, error) {
	s.mu.Lock()
	a, ok := s.held[name]
	s.mu.Unlock()
	if ok {
		return a, nil
	}
	return s.Store.AccountGet(ctx, name)
}

// TestACallRacingTheAccountsDeletionGetsNotFound: a Submit or an
// ExecuteOnProxy that read the account just before it was deleted (from
// the automator's cache, or a read that came first) and stores its unit
// after gets NOT_FOUND, "account "NAME" not found", as a call made after
// the deletion does, whether the automator held the account's keys or
// reads them then; not INTERNAL, and no ERROR line in the log.
func TestACallRacingTheAccountsDeletionGetsNotFound(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	stale := &staleAccounts{held: map[string]store.Account{}}
	// The automator does not look for deletions while the test runs: only
	// the unit's own writes and reads can tell it.
	e := newEnv(t, envOptions{log: log, pollWindow: time.Second, sweepInterval: time.Hour,
		wrap: func(st store.Store) store.Store { stale.Store = st; return stale }})
	e.addAccount("globex")
	caller := e.callerClient()
	submit(t, caller, e.account, time.Hour) // the automator holds acme's keys, not globex's
	stale.hold(t, e.account)
	stale.hold(t, "globex")
	e.deleteAccount(e.account)
	e.deleteAccount("globex")

	for _, name := range []string{e.account, "globex"} {
		req := &automatorv1.ExecuteRequest{Account: name, Command: &automatorv1.Command{Script: "x.sh"}}
		_, err := caller.Submit(context.Background(), req)
		if status.Code(err) != codes.NotFound || status.Convert(err).Message() != `account "`+name+`" not found` {
			t.Errorf("Submit on %s, deleted after the automator read it: %v; want NotFound, account %q not found", name, err, name)
		}
		_, err = caller.ExecuteOnProxy(context.Background(), req)
		if status.Code(err) != codes.NotFound || status.Convert(err).Message() != `account "`+name+`" not found` {
			t.Errorf("ExecuteOnProxy on %s, deleted after the automator read it: %v; want NotFound, account %q not found", name, err, name)
		}
	}
	if lines := log.lines("level=ERROR"); len(lines) > 0 {
		t.Errorf("the automator logged errors for calls on a deleted account:\n%s", strings.Join(lines, "\n"))
	}
}

// sealedListings records the listings of deleted accounts' units that
// asked for their sealed blobs.
type sealedListings struct {
	store.Store
	mu     sync.Mutex
	listed int // listings of a tombstone's units
	sealed int // of which with their sealed blobs
}

func (s *sealedListings) Unwrap() store.Store { return s.Store }

func (s *sealedListings) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	if _, ok := store.DeletedAccount(p.Account); ok {
		s.mu.Lock()
		s.listed++
		if !p.WithoutSealed {
			s.sealed++
		}
		s.mu.Unlock()
	}
	return s.Store.WorkList(ctx, p)
}

// TestAccountDeletionListsItsUnitsWithoutTheirSealedBlobs: the automator
// acting on a deletion reads the cancelled units of the account without
// their sealed commands and results, which it does not use (it wakes
// their callers and counts them) and which may weigh megabytes a unit.
func TestAccountDeletionListsItsUnitsWithoutTheirSealedBlobs(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	lists := &sealedListings{}
	e := newEnv(t, envOptions{pollWindow: time.Hour, log: log, sweepInterval: 20 * time.Millisecond,
		wrap: func(st store.Store) store.Store { lists.Store = cachedCredentials(st); return lists }})
	caller := e.callerClient()
	queued := submit(t, caller, e.account, time.Hour)
	waitQueued := waitAsync(caller, queued.GetWorkId())

	e.deleteAccount(e.account)
	waittest.Recv(t, waitQueued, "a caller waiting for a unit of the deleted account to be answered")
	waittest.Until(t, "the automator to log acme's deletion", func() bool { return len(log.lines("account deleted", "account=acme ")) > 0 })

	lists.mu.Lock()
	defer lists.mu.Unlock()
	if lists.listed == 0 || lists.sealed != 0 {
		t.Errorf("listings of the deleted account's units: %d, %d of them with their sealed blobs; want some, none with them", lists.listed, lists.sealed)
	}
}

// TestAUnitOfAnAccountWhoseDeletionStoppedReadsAsDeleted: an account with
// more than a batch of ended units whose deletion stopped before any of
// them moved to its tombstone (SQLite moves them after the deletion, in
// batches) is deleted all the same for callers: a unit with a result,
// still stored under the account's own name, answers Get and Wait with
// FailedPrecondition naming the deletion and the tombstone in its detail;
// the account is unknown; and deleting it again finishes the move.
func TestAUnitOfAnAccountWhoseDeletionStoppedReadsAsDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Second, wrap: cachedCredentials})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()
	done := submit(t, api, e.account, time.Hour)
	e.completeClaim(px, "host-a", claimOne(t, px, "host-a"))
	now := time.Now()
	for i := range 150 { // more than a batch
		id := fmt.Sprintf("w_old_%03d", i)
		if _, err := e.store.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: e.account, KeyID: 1, Now: now, Deadline: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.WorkCancel(ctx, store.WorkCancelParams{ID: id, Reason: "old", Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	stop, cancel := context.WithCancel(ctx)
	d, err := cachedCredentials(e.store).AccountDelete(stop, store.AccountDeleteParams{Name: e.account, Reason: "deleted", Now: now,
		Moving: func(store.AccountDeletion, int) { cancel() }})
	if !errors.Is(err, store.ErrDeletionUnfinished) {
		t.Fatalf("AccountDelete stopped before its first batch: %v, want ErrDeletionUnfinished", err)
	}
	if w, err := e.store.WorkGet(ctx, done.GetWorkId()); err != nil || w.Account != d.Tombstone {
		t.Fatalf("the unit with a result reads as of %q (%v), want its tombstone %q", w.Account, err, d.Tombstone)
	}

	_, getErr := api.Get(ctx, &automatorv1.GetRequest{WorkId: done.GetWorkId()})
	_, waitErr := api.Wait(ctx, &automatorv1.WaitRequest{WorkId: done.GetWorkId()})
	for name, err := range map[string]error{"Get": getErr, "Wait": waitErr} {
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `account "acme"`) || !strings.Contains(err.Error(), "deleted") {
			t.Errorf("%s of a unit of the account whose deletion stopped: %v; want FailedPrecondition saying its account was deleted", name, err)
			continue
		}
		if w, ok := client.UnreadableWork(err); !ok || w.ID != done.GetWorkId() || w.Account != d.Tombstone || w.Result != nil {
			t.Errorf("%s: the refusal's detail: %+v, %v; want the unit under %q, without its result", name, w, ok, d.Tombstone)
		}
	}
	if _, err := api.ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}}); status.Code(err) != codes.NotFound {
		t.Errorf("ExecuteOnProxy on the account whose deletion stopped: %v; want NotFound", err)
	}

	again, err := e.store.AccountDelete(ctx, store.AccountDeleteParams{Name: e.account, Now: time.Now()})
	if err != nil || !again.Resumed || again.Units != 151 {
		t.Errorf("deleting again: resumed %v, %d units moved, %v; want the 151 units moved", again.Resumed, again.Units, err)
	}
}
