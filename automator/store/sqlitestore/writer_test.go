package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

// blockWriter runs a write that holds the writer until release is called,
// and returns once the writer is inside it. done receives the write's
// outcome.
func blockWriter(t *testing.T, s *Store, ctx context.Context) (release func(), done <-chan error) {
	t.Helper()
	inside, hold := make(chan struct{}), make(chan struct{})
	out := make(chan error, 1)
	go func() {
		out <- s.writeTx(ctx, func(ctx context.Context, tx querier) error {
			close(inside)
			<-hold
			_, err := tx.ExecContext(ctx, `INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES ('blocker', x'00', 1, x'00', 0)`)
			return err
		})
	}()
	waittest.Recv(t, inside, "the blocking write to hold the writer")
	var once sync.Once
	return func() { once.Do(func() { close(hold) }) }, out
}

// waitQueued waits until n writes wait for the leader.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	waittest.Until(t, fmt.Sprintf("%d writes to wait for the leader", n), func() bool { return s.w.group.Waiting() >= n })
}

func accountExists(t *testing.T, s *Store, name string) bool {
	t.Helper()
	_, err := s.AccountGet(t.Context(), name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AccountGet %s: %v", name, err)
	}
	return err == nil
}

// TestGroupCommitKeepsEachWriteAlone: writes waiting together commit in one
// transaction, and one that fails is rolled back alone, with its own error.
func TestGroupCommitKeepsEachWriteAlone(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
	release, blocked := blockWriter(t, s, t.Context())

	const n = 10
	errBoom := errors.New("boom")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.writeTx(t.Context(), func(ctx context.Context, tx querier) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES (?, ?, 1, x'00', 0)`,
					fmt.Sprintf("a%d", i), []byte{byte(i + 1)}); err != nil {
					return err
				}
				if i%2 == 1 {
					return errBoom // after its insert: the insert must go too
				}
				return nil
			})
		}()
	}
	waitQueued(t, s, n)
	before := s.w.commits.Load()
	release()
	if err := waittest.Recv(t, blocked, "the blocking write to end once released"); err != nil {
		t.Fatalf("the blocking write: %v", err)
	}
	waittest.Group(t, &wg, "the waiting writes to return")
	if got := s.w.commits.Load() - before; got != 2 {
		t.Errorf("%d transactions committed the blocker and %d waiting writes, want 2 (the blocker, then one batch)", got, n)
	}
	for i := range n {
		name := fmt.Sprintf("a%d", i)
		switch {
		case i%2 == 1 && !errors.Is(errs[i], errBoom):
			t.Errorf("write %d: error %v, want its own error", i, errs[i])
		case i%2 == 1 && accountExists(t, s, name):
			t.Errorf("write %d failed but its insert was kept", i)
		case i%2 == 0 && errs[i] != nil:
			t.Errorf("write %d: %v", i, errs[i])
		case i%2 == 0 && !accountExists(t, s, name):
			t.Errorf("write %d succeeded but its insert is missing", i)
		}
	}
}

// TestAbandonedWriteNeverRuns: a caller that gives up while its write waits
// gets its context's error, and the write never happens.
func TestAbandonedWriteNeverRuns(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
	release, blocked := blockWriter(t, s, t.Context())
	defer release()

	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{}, 1)
	out := make(chan error, 1)
	go func() {
		out <- s.writeTx(ctx, func(ctx context.Context, tx querier) error {
			ran <- struct{}{}
			return nil
		})
	}()
	waitQueued(t, s, 1)
	cancel()
	if err := waittest.Recv(t, out, "the abandoned write to return once its caller gave up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned write: %v, want context.Canceled", err)
	}
	release()
	if err := waittest.Recv(t, blocked, "the blocking write to end once released"); err != nil {
		t.Fatal(err)
	}
	// A write after it runs after it would have: the writer is past it.
	if err := s.writeTx(t.Context(), func(context.Context, querier) error { return nil }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Error("the abandoned write ran")
	default:
	}
}

// TestWriteUnderWayIsWaitedFor: a caller that gives up once its write has
// started still gets what happened, since the write may commit.
func TestWriteUnderWayIsWaitedFor(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
	ctx, cancel := context.WithCancel(t.Context())
	release, blocked := blockWriter(t, s, ctx)
	cancel()
	release()
	if err := waittest.Recv(t, blocked, "the started write whose caller gave up to end"); err != nil {
		t.Fatalf("a started write whose caller gave up: %v, want its real outcome (nil)", err)
	}
	if !accountExists(t, s, "blocker") {
		t.Error("the write did not commit")
	}
}

// TestCloseCommitsWhatWasHandedOver: Close lets the writes already handed
// over commit, and refuses later ones.
func TestCloseCommitsWhatWasHandedOver(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	release, blocked := blockWriter(t, s, t.Context())
	queued := make(chan error, 1)
	go func() {
		_, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "late", TokenHash: []byte{9}, KeyID: 1, SealedKey: []byte{1}, Now: testNow})
		queued <- err
	}()
	waitQueued(t, s, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	waittest.Until(t, "Close to close the writer's group", s.w.group.Closed)
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "after", TokenHash: []byte{8}, KeyID: 1, SealedKey: []byte{1}, Now: testNow}); !errors.Is(err, errClosed) {
		t.Errorf("a write after Close: %v, want %v", err, errClosed)
	}
	release()
	for i, c := range []<-chan error{blocked, queued, closed} {
		if err := waittest.Recv(t, c, []string{"the blocking write", "the write queued before Close", "Close"}[i]+" to return once the blocker was released"); err != nil {
			t.Fatal(err)
		}
	}
	s = open(t, path)
	for _, name := range []string{"blocker", "late"} {
		if !accountExists(t, s, name) {
			t.Errorf("account %s, handed over before Close, is missing", name)
		}
	}
}

// syncMode reads the writer connection's synchronous setting from inside a
// write: 2 is FULL, 1 NORMAL.
func syncMode(ctx context.Context, tx querier) (int, error) {
	var mode int
	err := tx.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&mode)
	return mode, err
}

// TestSyncLaterOnlyWhenTheWholeBatchMay: a batch of writes that may be
// answered before they are on disk commits without an fsync; any other
// write in the batch, or the next batch, commits durably again.
func TestSyncLaterOnlyWhenTheWholeBatchMay(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
	ctx := t.Context()
	modeOf := func(syncLater bool) int {
		t.Helper()
		var mode int
		if err := s.write1(ctx, syncLater, func(ctx context.Context, tx querier) (err error) {
			mode, err = syncMode(ctx, tx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return mode
	}
	if got := modeOf(true); got != 1 {
		t.Errorf("a lone sync-later write runs with synchronous=%d, want 1 (NORMAL)", got)
	}
	if got := modeOf(false); got != 2 {
		t.Errorf("the durable write after it runs with synchronous=%d, want 2 (FULL)", got)
	}

	// A sync-later write batched with a durable one: FULL.
	release, blocked := blockWriter(t, s, ctx)
	modes := make(chan int, 2)
	for _, later := range []bool{true, false} {
		go func() {
			var mode int
			_ = s.write1(ctx, later, func(ctx context.Context, tx querier) (err error) {
				mode, err = syncMode(ctx, tx)
				return err
			})
			modes <- mode
		}()
	}
	waitQueued(t, s, 2)
	release()
	if err := waittest.Recv(t, blocked, "the blocking write to end once released"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got := waittest.Recv(t, modes, "each write of the mixed batch to run"); got != 2 {
			t.Errorf("a batch mixing sync-later and durable writes runs with synchronous=%d, want 2 (FULL)", got)
		}
	}

	// The product's use: the enqueue of a unit nobody knows yet.
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte{1}, KeyID: 1, SealedKey: []byte{1}, Now: testNow}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-1", Account: "acme", KeyID: 1, SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour), SyncLater: true}); err != nil {
		t.Fatal(err)
	}
	if !s.w.lazy {
		t.Error("WorkEnqueue with SyncLater committed durably")
	}
}

// TestSyncLaterIsOnDiskSoonAfter: a write committed without an fsync gets
// one of the WAL right after, off the writer's path.
func TestSyncLaterIsOnDiskSoonAfter(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
	synced := make(chan struct{}, 1)
	s.w.syncer.onSync = func() {
		select {
		case synced <- struct{}{}:
		default:
		}
	}
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte{1}, KeyID: 1, SealedKey: []byte{1}, Now: testNow}); err != nil {
		t.Fatal(err)
	}
	if n := s.w.syncer.syncs.Load(); n != 0 {
		t.Errorf("%d extra WAL fsyncs after a durable write, want none", n)
	}
	if _, err := s.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: "w-1", Account: "acme", KeyID: 1, SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour), SyncLater: true}); err != nil {
		t.Fatal(err)
	}
	// Generous: this bounds a failing test, it measures nothing.
	select {
	case <-synced:
	case <-time.After(30 * time.Second):
		t.Fatal("the WAL was not fsynced after a write committed without an fsync")
	}
}

// TestSyncLaterCoveredByADurableCommitIsNotSyncedAgain: a durable commit
// after a commit without an fsync syncs the WAL, and with it that commit,
// so the syncer leaves it (its fsync would only delay the durable
// commit's); a commit without an fsync that nothing durable followed is
// synced, at the latest when the store closes.
func TestSyncLaterCoveredByADurableCommitIsNotSyncedAgain(t *testing.T) {
	t.Parallel()
	for _, durableAfter := range []bool{true, false} {
		s := open(t, filepath.Join(t.TempDir(), "a.db"))
		s.w.syncer.delay = time.Hour // only Close ends the wait
		ctx := t.Context()
		if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte{1}, KeyID: 1, SealedKey: []byte{1}, Now: testNow}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-1", Account: "acme", KeyID: 1, SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour), SyncLater: true}); err != nil {
			t.Fatal(err)
		}
		if durableAfter {
			if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-2", Account: "acme", KeyID: 1, SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		want := int64(1)
		if durableAfter {
			want = 0
		}
		if n := s.w.syncer.syncs.Load(); n != want {
			t.Errorf("durable commit after: %v: the syncer fsynced %d times, want %d", durableAfter, n, want)
		}
	}
}

// TestWritesOthersActOnAreDurableWhenAnswered: every write whose answer
// someone acts on commits with an fsync before it is answered (a claim
// before the proxy runs it, a result or an ending before the caller sees
// it, an enqueue handed straight to a poll before that poll gets it); only
// a plain sync-later enqueue, whose id nobody holds yet, may commit
// without one. A SIGKILL cannot tell these apart (the page cache survives
// it), so the test reads which kind of commit each write made.
func TestWritesOthersActOnAreDurableWhenAnswered(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
	ctx := t.Context()
	durable := func(what string) {
		t.Helper()
		if last, n := s.w.lastDurable.Load(), s.w.commits.Load(); last != n {
			t.Errorf("%s: answered after commit %d made without an fsync (latest durable commit: %d)", what, n, last)
		}
	}
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte{1}, KeyID: 1, SealedKey: []byte{1}, Now: testNow}); err != nil {
		t.Fatal(err)
	}
	enqueue := func(id string, claim *store.ClaimRef) {
		t.Helper()
		if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("c"),
			Now: testNow, Deadline: testNow.Add(time.Minute), SyncLater: true, ClaimFor: claim}); err != nil {
			t.Fatal(err)
		}
	}
	// A sync-later enqueue may commit without an fsync: the test relies
	// on it, to see that each write after it does not.
	enqueue("w-1", nil)
	if s.w.lastLazy.Load() != s.w.commits.Load() {
		t.Fatal("a sync-later enqueue committed durably: the test cannot tell the writes below apart")
	}
	enqueue("w-2", nil)
	if _, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "a", Max: 1, ClaimIDs: []string{"c-1"}, Now: testNow, Expect: true}); err != nil {
		t.Fatal(err)
	}
	durable("WorkClaim")
	if _, err := s.WorkComplete(ctx, store.WorkCompleteParams{ID: "w-1", ClaimID: "c-1", Account: "acme", State: store.StateSucceeded, SealedResult: []byte("r"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	durable("WorkComplete")
	enqueue("w-3", &store.ClaimRef{InstanceID: "a", ClaimID: "c-3"})
	durable("WorkEnqueue with SyncLater handed to a poll (ClaimFor)")
	if _, err := s.WorkCancel(ctx, store.WorkCancelParams{ID: "w-3", Reason: "test", Now: testNow}); err != nil {
		t.Fatal(err)
	}
	durable("WorkCancel")
	if ws, err := s.WorkExpire(ctx, store.WorkExpireParams{Now: testNow.Add(time.Hour), Max: 10}); err != nil || len(ws) != 1 {
		t.Fatalf("WorkExpire: %v, %d units; want w-2", err, len(ws))
	}
	durable("WorkExpire")
}

// TestADuplicateOfAUnitNotYetOnDiskIsSyncedBeforeItIsAnswered: a Submit
// whose idempotency key names an ExecuteOnProxy unit still waiting for its
// fsync hands that unit's id out, so the unit is on disk first; the
// duplicate's own write is rolled back and commits nothing that would sync
// it. An ExecuteOnProxy retry (SyncLater) hands nothing out and waits for
// no fsync.
func TestADuplicateOfAUnitNotYetOnDiskIsSyncedBeforeItIsAnswered(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
	s.w.syncer.delay = time.Hour // no background fsync in the test's time
	ctx := t.Context()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte{1}, KeyID: 1, SealedKey: []byte{1}, Now: testNow}); err != nil {
		t.Fatal(err)
	}
	enqueue := func(id string, syncLater bool) (store.Work, error) {
		return s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("c"),
			Now: testNow, Deadline: testNow.Add(time.Minute), IdempotencyKey: "k", IdempotencySince: testNow.Add(-time.Hour), SyncLater: syncLater})
	}
	if _, err := enqueue("w-1", true); err != nil {
		t.Fatal(err)
	}
	if s.w.lastLazy.Load() != s.w.commits.Load() {
		t.Fatal("a sync-later enqueue committed durably: the test cannot see the fsync it is about")
	}
	if w, err := enqueue("w-2", true); !errors.Is(err, store.ErrDuplicate) || w.ID != "w-1" {
		t.Fatalf("sync-later enqueue with the key again: %v, unit %q; want ErrDuplicate and w-1", err, w.ID)
	}
	if n := s.w.syncer.syncs.Load(); n != 0 {
		t.Errorf("a sync-later duplicate fsynced the WAL %d times, want none", n)
	}
	if w, err := enqueue("w-3", false); !errors.Is(err, store.ErrDuplicate) || w.ID != "w-1" {
		t.Fatalf("durable enqueue with the key again: %v, unit %q; want ErrDuplicate and w-1", err, w.ID)
	}
	if n := s.w.syncer.syncs.Load(); n != 1 {
		t.Errorf("a durable duplicate of a unit committed without its fsync returned after %d fsyncs of the WAL, want 1", n)
	}
	if w, err := enqueue("w-4", false); !errors.Is(err, store.ErrDuplicate) || w.ID != "w-1" {
		t.Fatalf("durable enqueue with the key a third time: %v, unit %q; want ErrDuplicate and w-1", err, w.ID)
	}
	if n := s.w.syncer.syncs.Load(); n != 1 {
		t.Errorf("a durable duplicate of a unit on disk already fsynced the WAL again (%d fsyncs, want 1)", n)
	}
}
