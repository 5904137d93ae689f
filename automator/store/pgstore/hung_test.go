package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestAReplicaHungInItsSweepHoldsNoUnitBack: a replica that hangs (stopped,
// frozen, cut off from PostgreSQL) in the middle of its sweep must not keep
// the due units it read from the other replicas' sweepers, or they time out
// only when it comes back: a sweep holds no lock across a round trip. The
// hung replica here is a store whose connection stops carrying anything to
// PostgreSQL once it sends the statement that times units out.
func TestAReplicaHungInItsSweepHoldsNoUnitBack(t *testing.T) {
	dsn := pgtest.DSN(t)
	other := open(t, dsn)
	ctx := t.Context()
	if _, err := other.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	p := enqueueParams("due", "acme")
	p.Deadline = testNow.Add(time.Second)
	if _, err := other.WorkEnqueue(ctx, p); err != nil {
		t.Fatal(err)
	}

	r := startMarkerRelay(t, dsn, hang)
	hung := open(t, r.dsn)
	t.Cleanup(r.close) // before the store's own Close, which waits for the hung sweep
	r.arm([]byte("timed_out"))
	expire := func(s *Store) store.WorkExpireParams {
		return store.WorkExpireParams{Now: testNow.Add(time.Minute), Audit: &store.AuditEvent{At: testNow, Kind: store.AuditWorkEnded}}
	}
	go func() {
		// Hangs until the relay is closed; its outcome does not matter.
		_, _ = hung.WorkExpire(context.Background(), expire(hung))
	}()
	waittest.Recv(t, r.fired, "the hung replica's sweep to send the statement that times units out")

	ws, err := other.WorkExpire(ctx, expire(other))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].ID != "due" || ws[0].State != store.StateTimedOut {
		t.Fatalf("the other replica's sweep timed out %v; want unit due (the hung replica must hold no lock on it)", ws)
	}
}

// TestAReplicaHungAfterRecordingPollsHoldsNoInstanceBack: a replica that
// hangs after sending the polls it records must hold no lock on their
// instances' rows, or every other replica recording a poll of one of them
// waits until it comes back. The batch is its own transaction, with no
// COMMIT to wait for: a relay that stops carrying anything once a COMMIT
// passes finds none to stop.
func TestAReplicaHungAfterRecordingPollsHoldsNoInstanceBack(t *testing.T) {
	dsn := pgtest.DSN(t)
	other := open(t, dsn)
	ctx := t.Context()
	if _, err := other.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	seen := func(at time.Time) []store.InstanceSeenParams {
		return []store.InstanceSeenParams{{Account: "acme", InstanceID: "host-a", Hostname: "host-a", Now: at}}
	}

	r := startMarkerRelay(t, dsn, hang)
	hung := open(t, r.dsn)
	t.Cleanup(r.close) // before the store's own Close, which waits for the hung call
	r.arm([]byte("commit"))
	done := make(chan error, 1)
	go func() { done <- hung.InstancesSeen(context.Background(), seen(testNow)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("InstancesSeen through the relay: %v", err)
		}
	case <-r.fired:
		// Its COMMIT is held: the rows stay locked while it hangs.
	case <-time.After(waittest.Bound):
		t.Fatal("InstancesSeen through the relay neither returned nor sent a COMMIT")
	}

	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := other.InstancesSeen(octx, seen(testNow.Add(time.Second))); err != nil {
		t.Fatalf("the other replica recording a poll of the same instance: %v; want it recorded (the hung replica must hold no lock on its row)", err)
	}
}

// TestAReplicaHungInsideATransactionLosesItsLocks: a replica that hangs
// inside a transaction of more than one round trip (here an enqueue with an
// idempotency key, stopped before its COMMIT) holds its locks only until
// PostgreSQL ends its idle session (idleInTransactionTimeout): the same
// key's enqueue on another replica, a caller's retry, then goes through.
func TestAReplicaHungInsideATransactionLosesItsLocks(t *testing.T) {
	dsn := pgtest.DSN(t)
	other := open(t, dsn)
	ctx := t.Context()
	if _, err := other.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	keyed := func(id string) store.WorkEnqueueParams {
		p := enqueueParams(id, "acme")
		p.IdempotencyKey, p.IdempotencySince = "k-1", testNow.Add(-time.Hour)
		return p
	}

	r := startMarkerRelay(t, dsn, hang)
	hung := open(t, r.dsn)
	t.Cleanup(r.close) // before the store's own Close, which waits for the hung call
	r.arm([]byte("commit"))
	go func() { _, _ = hung.WorkEnqueue(context.Background(), keyed("first")) }()
	waittest.Recv(t, r.fired, "the hung replica's enqueue to send its COMMIT")

	// The bound is well past the timeout, and far short of forever.
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	w, err := other.WorkEnqueue(octx, keyed("retry"))
	if err != nil {
		t.Fatalf("the same key's enqueue on another replica: %v; want it queued once the hung session is ended", err)
	}
	if w.ID != "retry" {
		t.Fatalf("the same key's enqueue on another replica returned unit %s; want retry (the hung one never committed)", w.ID)
	}
}
