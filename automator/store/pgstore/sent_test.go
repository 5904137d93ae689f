package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestWritesUnderWayRunToTheirEnd: a claim, a cancel and the writes made
// of a transaction (inTx), whose caller gives up while PostgreSQL runs
// them, run to their end, and their caller gets the outcome that was
// committed. Cut short, they could commit all the same while their caller
// is told they failed: a claim's units would stay claimed by an instance
// that never received them, until their deadline.
func TestWritesUnderWayRunToTheirEnd(t *testing.T) {
	const (
		lockWork    = `LOCK TABLE work IN EXCLUSIVE MODE`
		lockUnit    = `SELECT FROM work WHERE id = 'u' FOR UPDATE`
		lockAccount = `SELECT FROM accounts WHERE name = 'acme' FOR UPDATE` // the foreign keys' checks wait on it
	)
	for _, c := range []struct {
		name string
		// lock is held by another session while write is made: write
		// waits on it inside PostgreSQL.
		lock string
		// write makes the write under ctx and checks what it returns.
		write func(t *testing.T, ctx context.Context, s *Store) error
		// stored checks what the write committed.
		stored func(t *testing.T, s *Store)
	}{
		{"WorkClaim", lockWork, func(t *testing.T, ctx context.Context, s *Store) error {
			ws, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-1", Max: 2, ClaimIDs: []string{"c-1", "c-2"}, Now: testNow})
			if err == nil && (len(ws) != 1 || ws[0].ID != "u" || ws[0].ClaimID != "c-1") {
				t.Errorf("WorkClaim returned %+v, want unit u under claim c-1", ws)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if w := get(t, s, "u"); w.State != store.StateClaimed || w.InstanceID != "i-1" || w.ClaimID != "c-1" {
				t.Errorf("unit u: %s by %q under %q, want claimed by i-1 under c-1", w.State, w.InstanceID, w.ClaimID)
			}
		}},
		{"WorkCancel", lockUnit, func(t *testing.T, ctx context.Context, s *Store) error {
			w, err := s.WorkCancel(ctx, store.WorkCancelParams{ID: "u", Reason: "r", Now: testNow})
			if err == nil && w.State != store.StateCancelled {
				t.Errorf("WorkCancel returned the unit %s, want cancelled", w.State)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if w := get(t, s, "u"); w.State != store.StateCancelled {
				t.Errorf("unit u: %s, want cancelled", w.State)
			}
		}},
		{"WorkExpire", lockWork, func(t *testing.T, ctx context.Context, s *Store) error {
			ws, err := s.WorkExpire(ctx, store.WorkExpireParams{Now: testNow.Add(2 * time.Hour)})
			if err == nil && (len(ws) != 1 || ws[0].ID != "u") {
				t.Errorf("WorkExpire returned %d units, want unit u", len(ws))
			}
			return err
		}, func(t *testing.T, s *Store) {
			if w := get(t, s, "u"); w.State != store.StateTimedOut {
				t.Errorf("unit u: %s, want timed_out", w.State)
			}
		}},
		{"WorkEnqueue with an idempotency key", lockAccount, func(t *testing.T, ctx context.Context, s *Store) error {
			p := enqueueParams("keyed", "acme")
			p.IdempotencyKey = "k"
			_, err := s.WorkEnqueue(ctx, p)
			return err
		}, func(t *testing.T, s *Store) {
			get(t, s, "keyed")
		}},
		{"AccountRotate", lockAccount, func(t *testing.T, ctx context.Context, s *Store) error {
			_, err := s.AccountRotate(ctx, store.AccountRotateParams{Name: "acme", TokenHash: []byte("new token"), Now: testNow})
			return err
		}, func(t *testing.T, s *Store) {
			if _, err := s.AccountGetByToken(t.Context(), store.AccountGetByTokenParams{TokenHash: []byte("new token"), Now: testNow}); err != nil {
				t.Errorf("the rotated token: %v, want acme", err)
			}
		}},
		{"InstancesSeen", lockAccount, func(t *testing.T, ctx context.Context, s *Store) error {
			return s.InstancesSeen(ctx, []store.InstanceSeenParams{{Account: "acme", InstanceID: "i-1", Hostname: "h", Version: "v", Now: testNow}})
		}, func(t *testing.T, s *Store) {
			if in, err := s.InstanceList(t.Context(), "acme"); err != nil || len(in) != 1 {
				t.Errorf("InstanceList = %v, %v; want instance i-1", in, err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := storeWithClaims(t, 0)
			enqueue(t, s, "u", testNow, testNow.Add(time.Hour))
			lock, lockPID := lockWith(t, s, c.lock)
			err := giveUpUnderWay(t, s, lock, lockPID, c.name, func(ctx context.Context) error {
				return c.write(t, ctx, s)
			})
			if err != nil {
				t.Fatalf("%s whose caller gave up under way: %v, want the outcome it committed", c.name, err)
			}
			c.stored(t, s)
		})
	}
}

// get reads unit id, which must exist.
func get(t *testing.T, s *Store, id string) store.Work {
	t.Helper()
	w, err := s.WorkGet(t.Context(), id)
	if err != nil {
		t.Fatalf("WorkGet(%s): %v", id, err)
	}
	return w
}
