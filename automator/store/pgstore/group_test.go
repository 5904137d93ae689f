package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// The tests of group commit (group.go) hold the first write inside
// PostgreSQL, on a lock of the account's row that an
// enqueue's foreign key check needs, so that the writes made next must
// wait and then go as one batch.

// groupReaches returns a channel closed once s's grouper of writes has a
// batch on its way and waiting writes waiting (0: once a write leads a
// batch). It is set before the writes it watches are made.
func groupReaches(s *Store, waiting int) <-chan struct{} {
	return s.group.WaitingReaches(waiting)
}

// heldGroup is a store whose first write (an enqueue of "lead") is held in
// PostgreSQL until release.
type heldGroup struct {
	s      *Store
	lock   pgx.Tx
	leader sync.WaitGroup
}

// lockAccount locks account's row in a transaction of its own (rolled back
// at the end of the test, unless committed), and returns it with the
// process id of its session.
func lockAccount(t *testing.T, s *Store, account string) (pgx.Tx, int) {
	t.Helper()
	return lockWith(t, s, `SELECT FROM accounts WHERE name = $1 FOR UPDATE`, account)
}

// lockWith runs lock, a statement that takes a lock (a SELECT … FOR UPDATE
// must lock a row), in a transaction of its own as lockAccount does.
func lockWith(t *testing.T, s *Store, lock string, args ...any) (pgx.Tx, int) {
	t.Helper()
	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	tag, err := tx.Exec(t.Context(), lock, args...)
	if err != nil {
		t.Fatalf("%s: %v", lock, err)
	}
	if tag.Select() && tag.RowsAffected() == 0 {
		t.Fatalf("%s locked no row", lock)
	}
	var pid int
	if err := tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// giveUpUnderWay calls write with a context that it cancels once write's
// statement waits, inside PostgreSQL, on the lock held by the session
// lockPID (lock's); then it lets the statement go (commits lock) and
// returns write's outcome. write must not return before.
func giveUpUnderWay(t *testing.T, s *Store, lock pgx.Tx, lockPID int, what string, write func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- write(ctx) }()
	waitBlockedBy(t, s, lockPID, what)
	cancel()
	// Nothing says when a cancellation has been acted on: give it a moment
	// to cut the statement short (it must not), then let the statement go.
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while its statement still waited in PostgreSQL; want it to wait for the outcome", what, err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := lock.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return once its lock was released", what)
		return nil
	}
}

// waitBlockedBy waits until a session of s waits, inside PostgreSQL, on a
// lock held by the session lockPID.
func waitBlockedBy(t *testing.T, s *Store, lockPID int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var blocked bool
		if err := s.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, lockPID).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if blocked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never waited on the lock", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func holdGroup(t *testing.T, s *Store) *heldGroup {
	t.Helper()
	ctx := t.Context()
	lock, lockPID := lockAccount(t, s, "acme")
	h := &heldGroup{s: s, lock: lock}
	held := groupReaches(s, 0)
	h.leader.Go(func() {
		if _, err := s.WorkEnqueue(ctx, enqueueParams("lead", "acme")); err != nil {
			t.Errorf("WorkEnqueue(lead): %v", err)
		}
	})
	waittest.Recv(t, held, "the lead write to lead its batch")
	// The lead leads its batch; wait until that batch waits on the lock in
	// PostgreSQL, so that it was taken and nothing handed in later joins
	// it (between the two, a write handed in would have been taken too).
	waitBlockedBy(t, s, lockPID, "the held write")
	return h
}

// release lets the held write go, and with it the batch of the writes that
// waited, and waits for the held one to end.
func (h *heldGroup) release(t *testing.T) {
	t.Helper()
	if err := h.lock.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	waittest.Group(t, &h.leader, "the held write to end once its lock was released")
}

func enqueueParams(id, account string) store.WorkEnqueueParams {
	return store.WorkEnqueueParams{
		ID: id, Account: account, KeyID: 1, SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour),
		Audit: &store.AuditEvent{At: testNow, Kind: store.AuditWorkQueued, Account: account, WorkID: id},
	}
}

func completeParams(id, claimID string) store.WorkCompleteParams {
	return store.WorkCompleteParams{ID: id, ClaimID: claimID, State: store.StateSucceeded, SealedResult: []byte("r"),
		Now: testNow.Add(time.Second), Audit: &store.AuditEvent{At: testNow, Kind: store.AuditWorkEnded}}
}

// storeWithClaims opens a store with account acme and n claimed units,
// "claimed-0" … with claim ids "claim-0" ….
func storeWithClaims(t *testing.T, n int) *Store {
	t.Helper()
	s := open(t, pgtest.DSN(t))
	ctx := t.Context()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	claimIDs := make([]string, n)
	for i := range n {
		enqueue(t, s, fmt.Sprintf("claimed-%d", i), testNow.Add(time.Duration(i)*time.Microsecond), testNow.Add(time.Hour))
		claimIDs[i] = fmt.Sprintf("claim-%d", i)
	}
	if got, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i", Max: n, ClaimIDs: claimIDs, Now: testNow}); err != nil || len(got) != n {
		t.Fatalf("WorkClaim = %d units, %v; want %d", len(got), err, n)
	}
	return s
}

// TestConcurrentWritesShareOneTransaction: enqueues and completions made
// while every batch is on its way go together, in one transaction.
func TestConcurrentWritesShareOneTransaction(t *testing.T) {
	t.Parallel()
	const n = 10
	s := storeWithClaims(t, n)
	ctx := t.Context()
	h := holdGroup(t, s)

	waited := groupReaches(s, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := s.WorkEnqueue(ctx, enqueueParams(fmt.Sprintf("new-%d", i), "acme")); err != nil {
				t.Errorf("WorkEnqueue(new-%d): %v", i, err)
			}
		})
		wg.Go(func() {
			if _, err := s.WorkComplete(ctx, completeParams(fmt.Sprintf("claimed-%d", i), fmt.Sprintf("claim-%d", i))); err != nil {
				t.Errorf("WorkComplete(claimed-%d): %v", i, err)
			}
		})
	}
	waittest.Recv(t, waited, "the writes to wait behind the held batch")
	h.release(t)
	waittest.Group(t, &wg, "the writes that waited to return once the held batch went")

	// xmin is the transaction that wrote a row's current version.
	var batchTxs, allTxs int
	if err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FILTER (WHERE id <> 'lead'), count(DISTINCT xmin::text) FROM work`).Scan(&batchTxs, &allTxs); err != nil {
		t.Fatal(err)
	}
	if batchTxs != 1 {
		t.Errorf("the %d writes that waited were written by %d transactions, want 1", 2*n, batchTxs)
	}
	if allTxs != 2 {
		t.Errorf("the held write and the batch were written by %d transactions, want 2", allTxs)
	}
	for i := range n {
		if w, err := s.WorkGet(ctx, fmt.Sprintf("claimed-%d", i)); err != nil || w.State != store.StateSucceeded {
			t.Errorf("claimed-%d after the batch: %s, %v; want succeeded", i, w.State, err)
		}
	}
	events, err := s.AuditList(ctx, store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range events {
		kinds[string(e.Kind)]++
	}
	if kinds[string(store.AuditWorkQueued)] != n+1 || kinds[string(store.AuditWorkEnded)] != n {
		t.Errorf("audit events by kind: %v; want %d queued and %d ended", kinds, n+1, n)
	}
}

// TestAFailingWriteInABatchFailsAlone: a statement the server refuses
// rolls its batch back; every other write of the batch still gets its own
// outcome, and the refused one its precise error.
func TestAFailingWriteInABatchFailsAlone(t *testing.T) {
	t.Parallel()
	const n = 5
	s := storeWithClaims(t, n+1)
	ctx := t.Context()
	h := holdGroup(t, s)

	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	record := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs[what] = err
	}
	waited := groupReaches(s, 2*n+3)
	for i := range n {
		wg.Go(func() {
			_, err := s.WorkEnqueue(ctx, enqueueParams(fmt.Sprintf("new-%d", i), "acme"))
			record(fmt.Sprintf("enqueue new-%d", i), err)
		})
		wg.Go(func() {
			_, err := s.WorkComplete(ctx, completeParams(fmt.Sprintf("claimed-%d", i), fmt.Sprintf("claim-%d", i)))
			record(fmt.Sprintf("complete claimed-%d", i), err)
		})
	}
	// The foreign key refuses this one (an error in PostgreSQL).
	wg.Go(func() {
		_, err := s.WorkEnqueue(ctx, enqueueParams("stray", "nobody"))
		record("enqueue for an unknown account", err)
	})
	// These two change nothing, which is no error in PostgreSQL.
	wg.Go(func() {
		_, err := s.WorkEnqueue(ctx, enqueueParams("claimed-0", "acme"))
		record("enqueue of an existing id", err)
	})
	wg.Go(func() {
		_, err := s.WorkComplete(ctx, completeParams(fmt.Sprintf("claimed-%d", n), "another claim"))
		record("complete with another claim id", err)
	})
	waittest.Recv(t, waited, "the writes to wait behind the held batch")
	h.release(t)
	waittest.Group(t, &wg, "the writes that waited to return once the held batch went")

	for what, err := range errs {
		var want error
		switch what {
		case "enqueue for an unknown account":
			want = store.ErrNotFound
		case "enqueue of an existing id":
			want = store.ErrExists
		case "complete with another claim id":
			want = store.ErrClaimMismatch
		}
		if (want == nil && err != nil) || !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	for i := range n {
		if w, err := s.WorkGet(ctx, fmt.Sprintf("new-%d", i)); err != nil || w.State != store.StateQueued {
			t.Errorf("new-%d: %s, %v; want queued", i, w.State, err)
		}
		if w, err := s.WorkGet(ctx, fmt.Sprintf("claimed-%d", i)); err != nil || w.State != store.StateSucceeded {
			t.Errorf("claimed-%d: %s, %v; want succeeded", i, w.State, err)
		}
	}
	if _, err := s.WorkGet(ctx, "stray"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused unit: %v, want ErrNotFound", err)
	}
}

// TestAWriteCancelledWhileWaitingNeverRuns: a write whose context ends
// before its batch starts returns at once and is never written.
func TestAWriteCancelledWhileWaitingNeverRuns(t *testing.T) {
	t.Parallel()
	s := storeWithClaims(t, 0)
	h := holdGroup(t, s)

	ctx, cancel := context.WithCancel(t.Context())
	waited := groupReaches(s, 1)
	done := make(chan error, 1)
	go func() {
		_, err := s.WorkEnqueue(ctx, enqueueParams("cancelled", "acme"))
		done <- err
	}()
	waittest.Recv(t, waited, "the write to wait behind the held batch")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("WorkEnqueue = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled write did not return while the batches were held")
	}
	h.release(t)
	if _, err := s.WorkGet(t.Context(), "cancelled"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the cancelled unit: %v, want ErrNotFound", err)
	}
}

// TestALoneWriteUnderWayIsWaitedFor: a write that went at once, alone, and
// whose caller gives up while PostgreSQL runs it still gets its outcome,
// as a write of a batch does: cut off, it would commit unseen, its caller
// told it failed.
func TestALoneWriteUnderWayIsWaitedFor(t *testing.T) {
	t.Parallel()
	s := storeWithClaims(t, 0)
	lock, lockPID := lockAccount(t, s, "acme")
	// The enqueue waits, inside PostgreSQL, on the lock of acme's row.
	err := giveUpUnderWay(t, s, lock, lockPID, "WorkEnqueue", func(ctx context.Context) error {
		_, err := s.WorkEnqueue(ctx, enqueueParams("lone", "acme"))
		return err
	})
	if err != nil {
		t.Errorf("WorkEnqueue whose caller gave up under way: %v, want its real outcome (nil)", err)
	}
	if _, err := s.WorkGet(t.Context(), "lone"); err != nil {
		t.Errorf("WorkGet(lone): %v, want the unit", err)
	}
}

// TestABatchWhoseSessionEndsFailsEveryWrite: when the batch's session is
// ended under it (a FATAL error, which can come after a commit), no write
// of the batch can know whether it committed: each gets the error, and
// none is run again.
func TestABatchWhoseSessionEndsFailsEveryWrite(t *testing.T) {
	t.Parallel()
	const n = 3
	s := storeWithClaims(t, 0)
	ctx := t.Context()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "beta", TokenHash: []byte("hb"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	h := holdGroup(t, s)
	// The batch will wait on this lock of beta's row, inside PostgreSQL.
	lock, lockPID := lockAccount(t, s, "beta")

	waited := groupReaches(s, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := s.WorkEnqueue(ctx, enqueueParams(fmt.Sprintf("beta-%d", i), "beta"))
			errs <- err
		}()
	}
	waittest.Recv(t, waited, "the writes to wait behind the held batch")
	h.release(t)

	// The batch's session is the one waiting for the lock: end it.
	var batchPID int
	for deadline := time.Now().Add(waittest.Bound); batchPID == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the batch's session to wait on beta's lock", waittest.Bound)
		}
		err := s.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, lockPID).Scan(&batchPID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the batch never waited for the lock")
		}
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, batchPID); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a write of the ended session succeeded; want its error")
			}
		case <-time.After(10 * time.Second):
			// Run again, it would wait for the lock this test holds.
			t.Fatal("a write of the ended session did not return: was it run again?")
		}
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.WorkGet(ctx, fmt.Sprintf("beta-%d", i)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("beta-%d after its session ended: %v; want ErrNotFound (not run again)", i, err)
		}
	}
}

// TestRefusedStatementReadsTheUnlocalizedSeverity: a server whose messages
// are in German says FEHLER, not ERROR; only the unlocalized severity
// tells a refused statement from an ended session.
func TestRefusedStatementReadsTheUnlocalizedSeverity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Severity: "FEHLER", SeverityUnlocalized: "ERROR", Code: "23503"}, true},
		{&pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, false},
		{&pgconn.PgError{Severity: "ERROR", Code: "23503"}, true}, // before PostgreSQL 9.6
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR"}), true},
		{errors.New("connection reset by peer"), false},
	} {
		if got := refusedStatement(c.err); got != c.want {
			t.Errorf("refusedStatement(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestConcurrentReadsShareOneRoundTrip: WorkGet calls made while a read
// is on its way go together, and each gets its own unit (or ErrNotFound).
func TestConcurrentReadsShareOneRoundTrip(t *testing.T) {
	t.Parallel()
	const n = 10
	s := storeWithClaims(t, n)
	ctx := t.Context()
	before := s.BatchStats()
	release, sent := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	s.reads.testHookSend = func(size int) {
		mu.Lock()
		sizes = append(sizes, size)
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			// The first batch is taken and on its way: what comes now
			// waits for it (WaitingReaches(0) would fire before it is
			// taken, and a read handed in between would join it).
			close(sent)
			<-release
		}
	}

	firstDone := make(chan error, 1)
	go func() {
		w, err := s.WorkGet(ctx, "claimed-0")
		if err == nil && w.ID != "claimed-0" {
			err = fmt.Errorf("got unit %q", w.ID)
		}
		firstDone <- err
	}()
	waittest.Recv(t, sent, "the first WorkGet to be sent")
	waited := s.reads.WaitingReaches(n)
	var wg sync.WaitGroup
	for i := range n - 1 {
		id := fmt.Sprintf("claimed-%d", i+1)
		wg.Go(func() {
			if w, err := s.WorkGet(ctx, id); err != nil || w.ID != id || w.State != store.StateClaimed {
				t.Errorf("WorkGet(%s) = %q %s, %v", id, w.ID, w.State, err)
			}
		})
	}
	wg.Go(func() {
		if _, err := s.WorkGet(ctx, "nothing"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("WorkGet(nothing) = %v, want ErrNotFound", err)
		}
	})
	waittest.Recv(t, waited, "the other WorkGet calls to wait")
	close(release)
	waittest.Group(t, &wg, "the WorkGet calls that waited to return")
	if err := waittest.Recv(t, firstDone, "the first WorkGet to return once released"); err != nil {
		t.Errorf("the first WorkGet: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != n {
		t.Errorf("reads sent in batches of %v, want [1 %d]", sizes, n)
	}
	// BatchStats counts them under "read", and no write.
	after := s.BatchStats()
	if b, i := after["read"].Batches-before["read"].Batches, after["read"].Items-before["read"].Items; b != 2 || i != n+1 {
		t.Errorf("BatchStats counts %d read batches of %d reads in all, want 2 of %d", b, i, n+1)
	}
	if b := after["write"].Batches - before["write"].Batches; b != 0 {
		t.Errorf("BatchStats counts %d write batches for reads alone, want 0", b)
	}
}

// TestAWriteRolledBackToBreakADeadlockIsRunAgain: a write of one
// statement, through the grouper or on its own, that PostgreSQL rolls
// back to break a deadlock (it changed nothing) runs again, and its
// caller gets the outcome of that run, not the deadlock (a randomized
// test of the store's contract saw claims and completions answered so).
//
// The other session looks for a deadlock 3 s after it begins to wait, the
// write 1 s after (deadlock_timeout), so the write finds it first (with
// both at 1 s a busy machine let the other look first: a re-review),
// unless the other began to wait over 1 s after the write, whose look then
// found nothing yet: the scenario is then tried again, a few times, as
// TestATransactionRolledBackToBreakADeadlockRunsAgain does.
func TestAWriteRolledBackToBreakADeadlockIsRunAgain(t *testing.T) {
	t.Parallel()
	const both = `UPDATE work SET reason = 'the write' WHERE id IN ('claimed-0', 'claimed-1')`
	for name, write := range map[string]func(s *Store) error{
		"sentExec": func(s *Store) error {
			tag, err := s.sentExec(t.Context(), both)
			if err == nil && tag.RowsAffected() != 2 {
				err = fmt.Errorf("%d rows updated, want 2", tag.RowsAffected())
			}
			return err
		},
		"grouped": func(s *Store) error {
			var n int
			return s.write(t.Context(), `WITH u AS (`+both+` RETURNING 1) SELECT count(*) FROM u`, nil, func(r pgx.Row) error {
				if err := r.Scan(&n); err != nil {
					return err
				}
				if n != 2 {
					return fmt.Errorf("%d rows updated, want 2", n)
				}
				return nil
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const tries = 5
			for try := 1; try <= tries; try++ {
				if writeRolledBack(t, write) {
					return
				}
				t.Logf("try %d: the other session was chosen to break the deadlock (its wait began over deadlock_timeout after the write's); trying again", try)
			}
			t.Fatalf("in %d tries, PostgreSQL never rolled the write back to break the deadlock: this test needs it to", tries)
		})
	}
}

// writeRolledBack plays the deadlock once on a store of its own and
// reports whether the write was the one rolled back; when it was, it
// checks that the write ran again and its caller got that run's outcome.
func writeRolledBack(t *testing.T, write func(s *Store) error) bool {
	t.Helper()
	s := storeWithClaims(t, 2)
	// The other transaction holds claimed-1; the write takes claimed-0 and
	// waits for claimed-1; then the other asks for claimed-0.
	other, otherPID := lockWith(t, s, `UPDATE work SET reason = 'the other' WHERE id = 'claimed-1'`)
	if _, err := other.Exec(t.Context(), `SET LOCAL deadlock_timeout = '3s'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- write(s) }()
	waitBlockedBy(t, s, otherPID, "the write")
	second := make(chan error, 1)
	go func() {
		_, err := other.Exec(context.Background(), `UPDATE work SET reason = 'the other' WHERE id = 'claimed-0'`)
		if err == nil {
			err = other.Commit(context.Background())
		}
		second <- err
	}()
	if err := waittest.Recv(t, second, "the other transaction to take claimed-0 and commit"); err != nil {
		if code, _ := pgCode(err); code == codeDeadlockDetected {
			waittest.Recv(t, done, "the write to end once the other was rolled back")
			return false
		}
		t.Fatalf("the other transaction: %v", err)
	}
	if err := waittest.Recv(t, done, "the write to end"); err != nil {
		t.Fatalf("a write rolled back to break a deadlock: %v; want it run again", err)
	}
	var reasons []string
	rows, err := s.pool.Query(t.Context(), `SELECT reason FROM work WHERE id IN ('claimed-0', 'claimed-1') ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if reasons, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(reasons) != 2 || reasons[0] != "the write" || reasons[1] != "the write" {
		t.Errorf("the units' reasons: %q; want both the write's, run after the other transaction", reasons)
	}
	return true
}
