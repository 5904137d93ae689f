package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var endedCases = []testCase{
	{"AWriteWhoseContextHasEndedChangesNothing", testAWriteWhoseContextHasEnded},
}

// testAWriteWhoseContextHasEnded: a write whose caller's context is done
// before the write is made returns the context's error and changes
// nothing, whichever way the backend runs it (alone, in a batch, in a
// transaction). Once under way, a write runs to its end whatever becomes of
// the context (its caller gets the committed outcome): only a backend's
// own tests can hold a write under way.
func testAWriteWhoseContextHasEnded(f *fixture) {
	f.account("acme")
	f.enqueue("claimed", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "claimed", at(time.Second))
	f.enqueue("queued", "acme", at(time.Microsecond), at(time.Hour))
	f.enqueue("due", "acme", at(2*time.Microsecond), at(time.Minute))
	f.enqueue("to-cancel", "acme", at(3*time.Microsecond), at(time.Hour))
	f.enqueue("ended", "acme", at(4*time.Microsecond), at(time.Hour))
	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "ended", Reason: "r", Now: at(time.Second)}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "to-revoke", Hash: hash("key"), Name: "k", Now: at(0)}); err != nil {
		f.t.Fatal(err)
	}
	f.endSession("expired", at(time.Second))
	audited := f.auditLen()

	ended, cancel := context.WithCancel(f.ctx)
	cancel()
	later := at(2 * time.Minute)
	for _, c := range []struct {
		what  string
		write func() error
	}{
		{"WorkEnqueue", func() error {
			_, err := f.s.WorkEnqueue(ended, store.WorkEnqueueParams{ID: "new", Account: "acme", KeyID: 7, SealedCommand: []byte("c"), Now: later, Deadline: at(time.Hour)})
			return err
		}},
		{"WorkEnqueue with an idempotency key", func() error {
			_, err := f.s.WorkEnqueue(ended, store.WorkEnqueueParams{ID: "new-keyed", Account: "acme", KeyID: 7, SealedCommand: []byte("c"), Now: later, Deadline: at(time.Hour),
				IdempotencyKey: "key"})
			return err
		}},
		{"WorkClaim", func() error {
			_, err := f.s.WorkClaim(ended, store.WorkClaimParams{Account: "acme", InstanceID: "i-2", Max: 5, ClaimIDs: claimIDs("c", 5), Now: at(2 * time.Second)})
			return err
		}},
		{"WorkClaim expecting a unit", func() error {
			_, err := f.s.WorkClaim(ended, store.WorkClaimParams{Account: "acme", InstanceID: "i-2", Max: 5, ClaimIDs: claimIDs("c", 5), Now: at(2 * time.Second), Expect: true})
			return err
		}},
		{"WorkComplete", func() error {
			_, err := f.s.WorkComplete(ended, store.WorkCompleteParams{ID: claimed.ID, ClaimID: claimed.ClaimID, State: store.StateSucceeded, Now: at(2 * time.Second)})
			return err
		}},
		{"WorkCancel", func() error {
			_, err := f.s.WorkCancel(ended, store.WorkCancelParams{ID: "to-cancel", Reason: "r", Now: at(2 * time.Second)})
			return err
		}},
		{"WorkExpire", func() error {
			_, err := f.s.WorkExpire(ended, store.WorkExpireParams{Now: later})
			return err
		}},
		{"AccountRotate", func() error {
			_, err := f.s.AccountRotate(ended, store.AccountRotateParams{Name: "acme", TokenHash: hash("new token"), Now: later})
			return err
		}},
		{"InstancesSeen", func() error {
			_, err := f.s.InstancesSeen(ended, []store.InstanceSeenParams{{Account: "acme", InstanceID: "i-3", Hostname: "h", Version: "v", Now: later}})
			return err
		}},
		{"InstanceSeen", func() error {
			return f.s.InstanceSeen(ended, store.InstanceSeenParams{Account: "acme", InstanceID: "i-4", Hostname: "h", Version: "v", Now: later})
		}},
		{"AccountCreate", func() error {
			_, err := f.s.AccountCreate(ended, store.AccountCreateParams{Name: "beta", TokenHash: hash("beta token"), KeyID: 1, SealedKey: []byte("k"), Now: later})
			return err
		}},
		{"APIKeyCreate", func() error {
			_, err := f.s.APIKeyCreate(ended, store.APIKeyCreateParams{ID: "new-key", Hash: hash("new key"), Name: "n", Now: later})
			return err
		}},
		{"APIKeyRevoke", func() error {
			_, err := f.s.APIKeyRevoke(ended, store.APIKeyRevokeParams{ID: "to-revoke", Now: later})
			return err
		}},
		{"WorkPurge", func() error {
			_, err := f.s.WorkPurge(ended, store.WorkPurgeParams{QueuedBefore: later, Max: 10})
			return err
		}},
		{"ReplicaHeartbeat", func() error {
			return f.s.ReplicaHeartbeat(ended, store.ReplicaHeartbeatParams{ReplicaID: "r-1", Hostname: "h", Version: "v", StartedAt: later, Now: later})
		}},
		{"ReplicaPurge", func() error {
			_, err := f.s.ReplicaPurge(ended, store.ReplicaPurgeParams{SeenBefore: later.Add(time.Hour)})
			return err
		}},
		{"AuditAppend", func() error {
			_, err := f.s.AuditAppend(ended, store.AuditEvent{At: later, Kind: store.AuditAuthFailed, Source: "192.0.2.1"})
			return err
		}},
		{"DashboardSessionEnd", func() error {
			return f.s.DashboardSessionEnd(ended, store.DashboardSessionEndParams{ID: "new-session", Expires: at(time.Hour)})
		}},
		{"DashboardSessionPurge", func() error {
			_, err := f.s.DashboardSessionPurge(ended, store.DashboardSessionPurgeParams{ExpiredBefore: later})
			return err
		}},
	} {
		f.wantErr(c.what+" with a context done already", c.write(), context.Canceled)
	}

	for id, want := range map[string]store.State{
		"claimed": store.StateClaimed, "queued": store.StateQueued, "due": store.StateQueued, "to-cancel": store.StateQueued,
		"ended": store.StateCancelled, // not purged
	} {
		f.wantState(id, want)
	}
	for _, id := range []string{"new", "new-keyed"} {
		if f.exists(id) {
			f.t.Errorf("unit %s was stored", id)
		}
	}
	if _, err := f.byToken(hash("new token"), later); err == nil {
		f.t.Error("the rotated token authenticates: the rotation was written")
	}
	f.wantInstances("acme", nil)
	if _, err := f.s.AccountGet(f.ctx, "beta"); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("AccountGet(beta): %v, want %v: the account was created", err, store.ErrNotFound)
	}
	if _, err := f.s.APIKeyGetByHash(f.ctx, hash("new key")); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("APIKeyGetByHash(new key): %v, want %v: the key was created", err, store.ErrNotFound)
	}
	if k, err := f.s.APIKeyGetByHash(f.ctx, hash("key")); err != nil || !k.RevokedAt.IsZero() {
		f.t.Errorf("key to-revoke: revoked at %v, %v; want it not revoked", k.RevokedAt, err)
	}
	f.wantReplicas(nil)
	if n := f.auditLen(); n != audited {
		f.t.Errorf("the audit log holds %d events, want %d: the event was appended", n, audited)
	}
	f.wantSessionsEnded(map[string]bool{"new-session": false, "expired": true}, "after the writes whose context had ended")
}

// auditLen is the number of events in the audit log.
func (f *fixture) auditLen() int {
	f.t.Helper()
	es, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 1000})
	if err != nil {
		f.t.Fatalf("AuditList: %v", err)
	}
	return len(es)
}
