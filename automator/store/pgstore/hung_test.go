package pgstore

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"sync"
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

	r := startHangingRelay(t, dsn)
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
	waittest.Recv(t, r.hung, "the hung replica's sweep to send the statement that times units out")

	ws, err := other.WorkExpire(ctx, expire(other))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].ID != "due" || ws[0].State != store.StateTimedOut {
		t.Fatalf("the other replica's sweep timed out %v; want unit due (the hung replica must hold no lock on it)", ws)
	}
}

// hangingRelay carries a store's connections to PostgreSQL until, once
// armed with a marker, one of them sends it: from then on it carries nothing more to PostgreSQL on
// any connection (the store hangs, as seen from PostgreSQL: its
// transaction, if any, stays open), and says so on hung, once.
type hangingRelay struct {
	dsn  string
	hung chan struct{}

	lis    net.Listener
	once   sync.Once
	mu     sync.Mutex
	marker []byte // nil until armed
	held   bool
	conns  []net.Conn
}

func startHangingRelay(t *testing.T, dsn string) *hangingRelay {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = lis.Addr().String()
	r := &hangingRelay{dsn: u.String(), hung: make(chan struct{}), lis: lis}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, s)
			r.mu.Unlock()
			go func() { _, _ = io.Copy(c, s) }()
			go r.toServer(s, c)
		}
	}()
	return r
}

// arm makes the relay hang once marker passes (opening the store, with its
// migrations, goes through before).
func (r *hangingRelay) arm(marker []byte) {
	r.mu.Lock()
	r.marker = marker
	r.mu.Unlock()
}

// toServer copies the store's bytes to PostgreSQL until the marker passes
// (in a chunk with the bytes before it kept, so a marker split across reads
// is seen too), or the relay holds already.
func (r *hangingRelay) toServer(dst, src net.Conn) {
	var tail []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		seen := append(tail, buf[:n]...)
		r.mu.Lock()
		marker := r.marker
		if marker != nil && bytes.Contains(seen, marker) {
			r.held = true
			r.once.Do(func() { close(r.hung) })
		}
		held := r.held
		r.mu.Unlock()
		if held {
			continue // swallowed: PostgreSQL never hears of it
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
		tail = append(tail[:0], seen[max(0, len(seen)-64):]...)
	}
}

func (r *hangingRelay) close() {
	r.lis.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
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

	r := startHangingRelay(t, dsn)
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
	case <-r.hung:
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

	r := startHangingRelay(t, dsn)
	hung := open(t, r.dsn)
	t.Cleanup(r.close) // before the store's own Close, which waits for the hung call
	r.arm([]byte("commit"))
	go func() { _, _ = hung.WorkEnqueue(context.Background(), keyed("first")) }()
	waittest.Recv(t, r.hung, "the hung replica's enqueue to send its COMMIT")

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
