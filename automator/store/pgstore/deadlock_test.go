package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestATransactionRolledBackToBreakADeadlockRunsAgain: an account's
// deletion (a transaction) and another session each wait for a lock the
// other holds; PostgreSQL breaks the deadlock by rolling the deletion back
// (it waited first, so it finds the deadlock first), and the deletion runs
// again once the other session is done, rather than fail.
//
// A waiting session looks for a deadlock once, deadlock_timeout (1 s)
// after it began to wait. On a loaded machine the other session may begin
// its own wait more than that after the deletion began, so the deletion's
// look finds no deadlock yet and the other session's, later, picks itself:
// the scenario is then tried again, a few times, until the deletion is the
// one rolled back.
func TestATransactionRolledBackToBreakADeadlockRunsAgain(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	const tries = 5
	for try := 1; try <= tries; try++ {
		if deletionRolledBack(t, s, dsn, try) {
			return
		}
		t.Logf("try %d: the other session was chosen to break the deadlock (its wait began over deadlock_timeout after the deletion's); trying again", try)
	}
	t.Fatalf("in %d tries, PostgreSQL never rolled the deletion back to break the deadlock: this test needs it to", tries)
}

// deletionRolledBack plays the deadlock once, the try'th, with a unit of
// account acme (made for it), and reports whether the deletion was the
// transaction rolled back; when it was, it checks that the deletion ran
// again and cancelled the unit.
func deletionRolledBack(t *testing.T, s *Store, dsn string, try int) bool {
	ctx := t.Context()
	id := fmt.Sprintf("u%d", try)
	// Each deletion at its own time: a deleted account's name is kept as a
	// tombstone named by its deletion's time.
	now := testNow.Add(time.Duration(try) * time.Second)
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h" + id), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WorkEnqueue(ctx, enqueueParams(id, "acme")); err != nil {
		t.Fatal(err)
	}

	// The other session locks the unit's row first.
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT FROM work WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	var otherPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID); err != nil {
		t.Fatal(err)
	}

	// The deletion locks the account, then waits for the unit's row.
	deleted := make(chan error, 1)
	go func() {
		_, err := s.AccountDelete(context.Background(), store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: now})
		deleted <- err
	}()
	waitBlockedBy(t, s, otherPID, "the deletion")

	// Now the other session waits for the account's row: a deadlock.
	_, err = tx.Exec(ctx, `SELECT FROM accounts WHERE name = 'acme' FOR KEY SHARE`)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
		// The other session was rolled back; the deletion goes on.
		if err := waittest.Recv(t, deleted, "the deletion to end"); err != nil {
			t.Fatalf("AccountDelete: %v", err)
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waittest.Recv(t, deleted, "the deletion to end"); err != nil {
		t.Fatalf("AccountDelete after a deadlock: %v; want it run again and done", err)
	}
	if w, err := s.WorkGet(ctx, id); err != nil || w.State != store.StateCancelled {
		t.Errorf("unit %s after the deletion: %s, %v; want cancelled", id, w.State, err)
	}
	return true
}
