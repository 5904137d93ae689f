package pgstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestABatchWhoseAnswerIsLostAfterItsCommitIsNotRunAgain: a batch of
// enqueues and completions that PostgreSQL committed, but whose answer the
// store never got (its connection lost after the Sync went), gives every
// write an error, as its outcome is unknown, and runs none again (as
// TestABatchWhoseSessionEndsFailsEveryWrite, where the session ends before
// the commit). Run again, an enqueue would answer "exists" and a
// completion "not claimable" for writes that took effect.
func TestABatchWhoseAnswerIsLostAfterItsCommitIsNotRunAgain(t *testing.T) {
	t.Parallel()
	const n = 4
	dsn := pgtest.DSN(t)
	direct := open(t, dsn)
	ctx := t.Context()
	if _, err := direct.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	claimIDs := make([]string, n)
	for i := range n {
		enqueue(t, direct, fmt.Sprintf("claimed-%d", i), testNow.Add(time.Duration(i)*time.Microsecond), testNow.Add(time.Hour))
		claimIDs[i] = fmt.Sprintf("claim-%d", i)
	}
	if got, err := direct.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i", Max: n, ClaimIDs: claimIDs, Now: testNow}); err != nil || len(got) != n {
		t.Fatalf("WorkClaim = %d units, %v; want %d", len(got), err, n)
	}

	r := startMarkerRelay(t, dsn, deafen)
	s := open(t, r.dsn)
	t.Cleanup(r.close)
	h := holdGroup(t, s)
	r.arm([]byte("lost-"))

	waited := groupReaches(s, 2*n)
	errs := make(chan error, 2*n)
	for i := range n {
		go func() {
			_, err := s.WorkEnqueue(ctx, enqueueParams(fmt.Sprintf("lost-%d", i), "acme"))
			errs <- err
		}()
		go func() {
			_, err := s.WorkComplete(ctx, completeParams(fmt.Sprintf("claimed-%d", i), fmt.Sprintf("claim-%d", i)))
			errs <- err
		}()
	}
	waittest.Recv(t, waited, "the writes to wait behind the held batch")
	h.release(t)
	waittest.Recv(t, r.fired, "the batch to be sent")

	// Wait until PostgreSQL has committed the batch, then end the
	// connection its answer would come on.
	for deadline := time.Now().Add(waittest.Bound); ; {
		var queued, ended int
		if err := direct.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id LIKE 'lost-%'), count(*) FILTER (WHERE state = 'succeeded') FROM work`).Scan(&queued, &ended); err != nil {
			t.Fatal(err)
		}
		if queued == n && ended == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batch never committed: %d enqueues, %d completions", queued, ended)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.cut()

	for range 2 * n {
		err := waittest.Recv(t, errs, "a write of the batch to return once its connection was lost")
		switch {
		case err == nil:
			t.Error("a write of the batch whose answer was lost succeeded; want an error (its outcome is unknown)")
		case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrNotClaimable), errors.Is(err, store.ErrClaimMismatch):
			t.Errorf("a write of the batch whose answer was lost: %v; it was run again", err)
		case !store.IsUnavailable(err):
			t.Errorf("a write of the batch whose answer was lost: %v; want an error that says the connection was lost", err)
		}
	}
	events, err := direct.AuditList(ctx, store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range events {
		kinds[string(e.Kind)]++
	}
	if kinds[store.AuditWorkQueued] != n+1 || kinds[store.AuditWorkEnded] != n {
		t.Errorf("audit events by kind: %v; want %d queued and %d ended (each write once)", kinds, n+1, n)
	}
}
