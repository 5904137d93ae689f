package pgstore

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// deafRelay carries a store's connections to PostgreSQL until, once armed
// with a marker, one of them sends it: PostgreSQL gets those bytes (and
// runs, and commits, what they ask), but nothing it answers on that
// connection reaches the store any more, and cut then ends the store's side
// of it: the store learns of the connection's loss only after its
// statements committed, the outcome it cannot know.
type deafRelay struct {
	dsn  string
	sent chan struct{} // closed once the marker has passed

	lis    net.Listener
	once   sync.Once
	mu     sync.Mutex
	marker []byte
	deaf   map[net.Conn]bool // the store's sides of the connections made deaf
	conns  []net.Conn
}

func startDeafRelay(t *testing.T, dsn string) *deafRelay {
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
	r := &deafRelay{dsn: u.String(), sent: make(chan struct{}), lis: lis, deaf: map[net.Conn]bool{}}
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
			go r.toStore(c, s)
			go r.toServer(s, c)
		}
	}()
	return r
}

func (r *deafRelay) arm(marker []byte) {
	r.mu.Lock()
	r.marker = marker
	r.mu.Unlock()
}

// toServer copies the store's bytes to PostgreSQL; the connection whose
// bytes carry the marker is made deaf before they are passed on, so no
// answer to them reaches the store.
func (r *deafRelay) toServer(dst, src net.Conn) {
	var tail []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		seen := append(tail, buf[:n]...)
		r.mu.Lock()
		if r.marker != nil && bytes.Contains(seen, r.marker) {
			r.deaf[src] = true
			r.marker = nil
			r.once.Do(func() { close(r.sent) })
		}
		r.mu.Unlock()
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
		tail = append(tail[:0], seen[max(0, len(seen)-64):]...)
	}
}

// toStore copies PostgreSQL's answers to the store, but for a deaf
// connection.
func (r *deafRelay) toStore(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			dst.Close()
			return
		}
		r.mu.Lock()
		deaf := r.deaf[dst]
		r.mu.Unlock()
		if deaf {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// cut ends the store's side of the deaf connections.
func (r *deafRelay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.deaf {
		c.Close()
	}
}

func (r *deafRelay) close() {
	r.lis.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}

// TestABatchWhoseAnswerIsLostAfterItsCommitIsNotRunAgain: a batch of
// enqueues and completions that PostgreSQL committed, but whose answer the
// store never got (its connection lost after the Sync went), gives every
// write an error, as its outcome is unknown, and runs none again (as
// TestABatchWhoseSessionEndsFailsEveryWrite, where the session ends before
// the commit). Run again, an enqueue would answer "exists" and a
// completion "not claimable" for writes that took effect.
func TestABatchWhoseAnswerIsLostAfterItsCommitIsNotRunAgain(t *testing.T) {
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

	r := startDeafRelay(t, dsn)
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
	within(t, waited, "the writes to wait behind the held batch")
	h.release(t)
	waittest.Recv(t, r.sent, "the batch to be sent")

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
