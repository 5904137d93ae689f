package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestATransactionRolledBackToBreakADeadlockRunsAgain: an account's
// deletion (a transaction) and another session each wait for a lock the
// other holds; PostgreSQL breaks the deadlock by rolling the deletion back
// (it waited first, so it finds the deadlock first), and the deletion runs
// again once the other session is done, rather than fail.
func TestATransactionRolledBackToBreakADeadlockRunsAgain(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	ctx := t.Context()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, "u", testNow, testNow.Add(time.Hour))

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
	if _, err := tx.Exec(ctx, `SELECT FROM work WHERE id = 'u' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var otherPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID); err != nil {
		t.Fatal(err)
	}

	// The deletion locks the account, then waits for the unit's row.
	deleted := make(chan error, 1)
	go func() {
		_, err := s.AccountDelete(context.Background(), store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: testNow})
		deleted <- err
	}()
	waitBlockedBy(t, s, otherPID, "the deletion")

	// Now the other session waits for the account's row: a deadlock.
	if _, err := tx.Exec(ctx, `SELECT FROM accounts WHERE name = 'acme' FOR KEY SHARE`); err != nil {
		t.Fatalf("the other session was chosen to break the deadlock (%v): this test needs the deletion to be", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waittest.Recv(t, deleted, "the deletion to end"); err != nil {
		t.Fatalf("AccountDelete after a deadlock: %v; want it run again and done", err)
	}
	if w, err := s.WorkGet(ctx, "u"); err != nil || w.State != store.StateCancelled {
		t.Errorf("unit u after the deletion: %s, %v; want cancelled", w.State, err)
	}
}
