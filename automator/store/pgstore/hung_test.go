package pgstore

import (
	"context"
	"slices"
	"strings"
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
	t.Parallel()
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
	t.Parallel()
	dsn := pgtest.DSN(t)
	other := open(t, dsn)
	ctx := t.Context()
	if _, err := other.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	seen := func(at time.Time) []store.InstanceSeenParams {
		return []store.InstanceSeenParams{{Account: "acme", InstanceID: "host-a", Hostname: "host-a", Now: at}}
	}
	// A batch writes only instances recorded.
	if err := other.InstanceSeen(ctx, seen(testNow.Add(-time.Second))[0]); err != nil {
		t.Fatal(err)
	}

	r := startMarkerRelay(t, dsn, hang)
	hung := open(t, r.dsn)
	t.Cleanup(r.close) // before the store's own Close, which waits for the hung call
	r.arm([]byte("commit"))
	done := make(chan error, 1)
	go func() {
		_, err := hung.InstancesSeen(context.Background(), seen(testNow))
		done <- err
	}()
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
	if _, err := other.InstancesSeen(octx, seen(testNow.Add(time.Second))); err != nil {
		t.Fatalf("the other replica recording a poll of the same instance: %v; want it recorded (the hung replica must hold no lock on its row)", err)
	}
}

// TestAReplicaHungInsideATransactionLosesItsLocks: a replica that hangs
// inside a transaction of more than one round trip (here an enqueue with an
// idempotency key, stopped before its COMMIT) holds its locks only until
// PostgreSQL ends its idle session (idleInTransactionTimeout): the same
// key's enqueue on another replica, a caller's retry, then goes through,
// and the hung call, once it hears of it, fails as the database being out
// of reach does.
func TestAReplicaHungInsideATransactionLosesItsLocks(t *testing.T) {
	t.Parallel()
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
	hungErr := make(chan error, 1)
	go func() {
		_, err := hung.WorkEnqueue(context.Background(), keyed("first"))
		hungErr <- err
	}()
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
	// The hung replica's call hears that its session was ended
	// (SQLSTATE 25P03): the database out of its reach, which callers
	// retry, not an internal error, on which they give up (review: an
	// `automator exec` exited 255 after a 6 s stall, its unit never
	// stored).
	if err := waittest.Recv(t, hungErr, "the hung enqueue to hear its session was ended"); !store.IsUnavailable(err) {
		t.Errorf("the hung enqueue: %v; want an error store.IsUnavailable reports", err)
	}
}

// TestASweepDoesNotWaitForAUnitAnotherSessionHolds: a session that holds a
// due unit's row lock must not hold up the other due units' timeouts. Such
// a session: a replica whose host died, or that was cut off, in the middle
// of sending a batch that completes the unit, before its Sync: PostgreSQL
// ran the UPDATE and waits for the rest, until its connection is found
// dead. The sweep leaves that unit to a later sweep, once the lock is gone.
func TestASweepDoesNotWaitForAUnitAnotherSessionHolds(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	ctx := t.Context()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"held", "free"} {
		p := enqueueParams(id, "acme")
		p.Deadline = testNow.Add(time.Second)
		if _, err := s.WorkEnqueue(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	release := pgtest.LockWorkRow(t, dsn, "held")

	sweep := func() []string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ws, err := s.WorkExpire(sctx, store.WorkExpireParams{Now: testNow.Add(time.Minute), Audit: &store.AuditEvent{At: testNow, Kind: store.AuditWorkEnded}})
		if err != nil {
			t.Fatalf("sweeping: %v; want the units not held timed out (the sweep must not wait for the held one)", err)
		}
		var ids []string
		for _, w := range ws {
			if w.State != store.StateTimedOut {
				t.Errorf("the sweep returned unit %s %s, want it timed out", w.ID, w.State)
			}
			ids = append(ids, w.ID)
		}
		return ids
	}
	if got := sweep(); !slices.Equal(got, []string{"free"}) {
		t.Fatalf("with unit held locked, the sweep timed out %v; want [free]", got)
	}
	release()
	if got := sweep(); !slices.Equal(got, []string{"held"}) {
		t.Fatalf("once the lock was gone, the sweep timed out %v; want [held]", got)
	}
}

// TestPostgreSQLIsAskedToNoticeADeadReplicaWithinHalfAMinute: the store's
// sessions (its pool's and its Listen's) carry deadPeerSettings, so that
// PostgreSQL ends the session of a replica whose host died or was cut off
// in the middle of a statement, and frees its locks, within about half a
// minute, not after the operating system's two hours; a setting the
// connection string gives is kept. (That the kernel then keeps to them is
// the kernel's: a loopback connection always answers.)
func TestPostgreSQLIsAskedToNoticeADeadReplicaWithinHalfAMinute(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	s := open(t, dsn+sep+"tcp_keepalives_idle=60")
	want := map[string]string{"tcp_keepalives_idle": "60", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3", "tcp_user_timeout": "30000"}
	for name, v := range want {
		var got string
		if err := s.pool.QueryRow(t.Context(), `SELECT setting FROM pg_settings WHERE name = $1`, name).Scan(&got); err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		if got != v {
			t.Errorf("the pool's session: %s = %s, want %s", name, got, v)
		}
		if got := s.listenConfig.RuntimeParams[name]; got != v {
			t.Errorf("the Listen session's settings: %s = %q, want %s", name, got, v)
		}
	}
}
