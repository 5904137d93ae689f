package pgstore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestWritesUnderWayRunToTheirEnd: every write that does not go through
// the grouper (a claim, a cancel, the writes made of a transaction (inTx),
// and the single statements of accounts, keys, instances, replicas, the
// audit log, purges and dashboard sign-outs), whose caller gives up while
// PostgreSQL runs it, runs to its end, and its caller gets the outcome
// that was committed. Cut short, it could commit all the same while its
// caller is told it failed: a claim's units would stay claimed by an
// instance that never received them, until their deadline; a created
// account or key would exist though its creation "failed".
func TestWritesUnderWayRunToTheirEnd(t *testing.T) {
	t.Parallel()
	const (
		lockWork    = `LOCK TABLE work IN EXCLUSIVE MODE`
		lockUnit    = `SELECT FROM work WHERE id = 'u' FOR UPDATE`
		lockAccount = `SELECT FROM accounts WHERE name = 'acme' FOR UPDATE` // the foreign keys' checks wait on it
	)
	// lockTable blocks every write to table (not its plain reads).
	lockTable := func(table string) string { return `LOCK TABLE ` + table + ` IN EXCLUSIVE MODE` }
	for _, c := range []struct {
		name string
		// setup, when set, prepares what write changes, before lock.
		setup func(t *testing.T, s *Store)
		// lock is held by another session while write is made: write
		// waits on it inside PostgreSQL.
		lock string
		// write makes the write under ctx and checks what it returns.
		write func(t *testing.T, ctx context.Context, s *Store) error
		// stored checks what the write committed.
		stored func(t *testing.T, s *Store)
	}{
		{"WorkClaim", nil, lockWork, func(t *testing.T, ctx context.Context, s *Store) error {
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
		{"WorkCancel", nil, lockUnit, func(t *testing.T, ctx context.Context, s *Store) error {
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
		{"WorkExpire", nil, lockWork, func(t *testing.T, ctx context.Context, s *Store) error {
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
		{"WorkEnqueue with an idempotency key", nil, lockAccount, func(t *testing.T, ctx context.Context, s *Store) error {
			p := enqueueParams("keyed", "acme")
			p.IdempotencyKey = "k"
			_, err := s.WorkEnqueue(ctx, p)
			return err
		}, func(t *testing.T, s *Store) {
			get(t, s, "keyed")
		}},
		{"AccountRotate", nil, lockAccount, func(t *testing.T, ctx context.Context, s *Store) error {
			_, err := s.AccountRotate(ctx, store.AccountRotateParams{Name: "acme", TokenHash: []byte("new token"), Now: testNow})
			return err
		}, func(t *testing.T, s *Store) {
			if _, err := s.AccountGetByToken(t.Context(), store.AccountGetByTokenParams{TokenHash: []byte("new token"), Now: testNow}); err != nil {
				t.Errorf("the rotated token: %v, want acme", err)
			}
		}},
		{"AccountDelete", nil, lockAccount, func(t *testing.T, ctx context.Context, s *Store) error {
			d, err := s.AccountDelete(ctx, store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: testNow})
			if err == nil && (len(d.Cancelled) != 1 || d.Cancelled[0].ID != "u") {
				t.Errorf("AccountDelete cancelled %+v, want unit u", d.Cancelled)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if _, err := s.AccountGet(t.Context(), "acme"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("AccountGet of the deleted account: %v, want ErrNotFound", err)
			}
			if w := get(t, s, "u"); w.State != store.StateCancelled {
				t.Errorf("unit u: %s, want cancelled", w.State)
			}
		}},
		{"InstancesSeen", func(t *testing.T, s *Store) {
			// A batch writes only instances recorded.
			if err := s.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: "i-1", Hostname: "h", Version: "v", Now: testNow}); err != nil {
				t.Fatal(err)
			}
		}, `SELECT FROM instances WHERE account = 'acme' AND instance_id = 'i-1' FOR UPDATE`, func(t *testing.T, ctx context.Context, s *Store) error {
			unrecorded, err := s.InstancesSeen(ctx, []store.InstanceSeenParams{{Account: "acme", InstanceID: "i-1", Hostname: "h", Version: "v2", Now: testNow.Add(time.Second)}})
			if err == nil && len(unrecorded) != 0 {
				t.Errorf("InstancesSeen returned %+v as not recorded, want none", unrecorded)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if in, err := s.InstanceList(t.Context(), "acme"); err != nil || len(in) != 1 || in[0].Version != "v2" {
				t.Errorf("InstanceList = %v, %v; want instance i-1 at v2", in, err)
			}
		}},
		{"InstanceSeen", nil, lockAccount, func(t *testing.T, ctx context.Context, s *Store) error {
			return s.InstanceSeen(ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "i-1", Hostname: "h", Version: "v", Now: testNow})
		}, func(t *testing.T, s *Store) {
			if in, err := s.InstanceList(t.Context(), "acme"); err != nil || len(in) != 1 {
				t.Errorf("InstanceList = %v, %v; want instance i-1", in, err)
			}
		}},
		{"AccountCreate", nil, lockTable("accounts"), func(t *testing.T, ctx context.Context, s *Store) error {
			a, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "beta", TokenHash: []byte("beta token"), KeyID: 1, SealedKey: []byte("k"), Now: testNow})
			if err == nil && a.Name != "beta" {
				t.Errorf("AccountCreate returned account %q, want beta", a.Name)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if _, err := s.AccountGet(t.Context(), "beta"); err != nil {
				t.Errorf("AccountGet(beta): %v, want the account", err)
			}
		}},
		{"APIKeyCreate", nil, lockTable("api_keys"), func(t *testing.T, ctx context.Context, s *Store) error {
			k, err := s.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: "k", Hash: []byte("key hash"), Name: "n", Now: testNow})
			if err == nil && k.ID != "k" {
				t.Errorf("APIKeyCreate returned key %q, want k", k.ID)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if _, err := s.APIKeyGetByHash(t.Context(), []byte("key hash")); err != nil {
				t.Errorf("APIKeyGetByHash: %v, want key k", err)
			}
		}},
		{"APIKeyRevoke", func(t *testing.T, s *Store) {
			if _, err := s.APIKeyCreate(t.Context(), store.APIKeyCreateParams{ID: "k", Hash: []byte("key hash"), Name: "n", Now: testNow}); err != nil {
				t.Fatal(err)
			}
		}, `SELECT FROM api_keys WHERE id = 'k' FOR UPDATE`, func(t *testing.T, ctx context.Context, s *Store) error {
			k, err := s.APIKeyRevoke(ctx, store.APIKeyRevokeParams{ID: "k", Now: testNow})
			if err == nil && k.RevokedAt.IsZero() {
				t.Error("APIKeyRevoke returned the key unrevoked")
			}
			return err
		}, func(t *testing.T, s *Store) {
			if k, err := s.APIKeyGetByHash(t.Context(), []byte("key hash")); err != nil || k.RevokedAt.IsZero() {
				t.Errorf("key k: revoked at %v, %v; want revoked", k.RevokedAt, err)
			}
		}},
		{"WorkPurge", func(t *testing.T, s *Store) {
			if _, err := s.WorkCancel(t.Context(), store.WorkCancelParams{ID: "u", Reason: "r", Now: testNow}); err != nil {
				t.Fatal(err)
			}
		}, lockTable("work"), func(t *testing.T, ctx context.Context, s *Store) error {
			n, err := s.WorkPurge(ctx, store.WorkPurgeParams{QueuedBefore: testNow.Add(time.Second), Max: 10})
			if err == nil && n != 1 {
				t.Errorf("WorkPurge deleted %d units, want 1", n)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if w, err := s.WorkGet(t.Context(), "u"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("unit u: %s, %v; want it deleted", w.State, err)
			}
		}},
		{"ReplicaHeartbeat", nil, lockTable("replicas"), func(t *testing.T, ctx context.Context, s *Store) error {
			return s.ReplicaHeartbeat(ctx, store.ReplicaHeartbeatParams{ReplicaID: "r-1", Hostname: "h", Version: "v", StartedAt: testNow, Now: testNow})
		}, func(t *testing.T, s *Store) {
			if rs, err := s.ReplicaList(t.Context()); err != nil || len(rs) != 1 {
				t.Errorf("ReplicaList = %v, %v; want replica r-1", rs, err)
			}
		}},
		{"ReplicaPurge", func(t *testing.T, s *Store) {
			if err := s.ReplicaHeartbeat(t.Context(), store.ReplicaHeartbeatParams{ReplicaID: "r-1", Hostname: "h", Version: "v", StartedAt: testNow, Now: testNow}); err != nil {
				t.Fatal(err)
			}
		}, lockTable("replicas"), func(t *testing.T, ctx context.Context, s *Store) error {
			n, err := s.ReplicaPurge(ctx, store.ReplicaPurgeParams{SeenBefore: testNow.Add(time.Second)})
			if err == nil && n != 1 {
				t.Errorf("ReplicaPurge deleted %d replicas, want 1", n)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if rs, err := s.ReplicaList(t.Context()); err != nil || len(rs) != 0 {
				t.Errorf("ReplicaList = %v, %v; want none", rs, err)
			}
		}},
		{"AuditAppend", nil, lockTable("audit"), func(t *testing.T, ctx context.Context, s *Store) error {
			e, err := s.AuditAppend(ctx, store.AuditEvent{At: testNow, Kind: store.AuditAuthFailed, Source: "192.0.2.1"})
			if err == nil && e.Seq == 0 {
				t.Error("AuditAppend returned no seq")
			}
			return err
		}, func(t *testing.T, s *Store) {
			es, err := s.AuditList(t.Context(), store.AuditListParams{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(es, func(e store.AuditEvent) bool { return e.Kind == store.AuditAuthFailed }) {
				t.Errorf("the audit log holds no %s event", store.AuditAuthFailed)
			}
		}},
		{"DashboardSessionEnd", nil, lockTable("dashboard_sessions_ended"), func(t *testing.T, ctx context.Context, s *Store) error {
			return s.DashboardSessionEnd(ctx, store.DashboardSessionEndParams{ID: "session", Expires: testNow.Add(time.Hour)})
		}, func(t *testing.T, s *Store) {
			if ended, err := s.DashboardSessionEnded(t.Context(), "session"); err != nil || !ended {
				t.Errorf("DashboardSessionEnded = %t, %v; want true", ended, err)
			}
		}},
		{"DashboardSessionPurge", func(t *testing.T, s *Store) {
			if err := s.DashboardSessionEnd(t.Context(), store.DashboardSessionEndParams{ID: "session", Expires: testNow}); err != nil {
				t.Fatal(err)
			}
		}, `SELECT FROM dashboard_sessions_ended WHERE id = 'session' FOR UPDATE`, func(t *testing.T, ctx context.Context, s *Store) error {
			n, err := s.DashboardSessionPurge(ctx, store.DashboardSessionPurgeParams{ExpiredBefore: testNow.Add(time.Second)})
			if err == nil && n != 1 {
				t.Errorf("DashboardSessionPurge deleted %d records, want 1", n)
			}
			return err
		}, func(t *testing.T, s *Store) {
			if ended, err := s.DashboardSessionEnded(t.Context(), "session"); err != nil || ended {
				t.Errorf("DashboardSessionEnded = %t, %v; want the record deleted", ended, err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := storeWithClaims(t, 0)
			enqueue(t, s, "u", testNow, testNow.Add(time.Hour))
			if c.setup != nil {
				c.setup(t, s)
			}
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
