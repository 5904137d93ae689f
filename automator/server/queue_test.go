package server

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
)

// countCounter counts WorkQueuedCount calls.
type countCounter struct {
	store.Store
	calls atomic.Int64
}

func (c *countCounter) WorkQueuedCount(ctx context.Context, account string, atMost int) (int, error) {
	c.calls.Add(1)
	return c.Store.WorkQueuedCount(ctx, account, atMost)
}

// TestQueueCapCountsOnlyNearTheCapOrWhenStale: far below the cap, the
// queue is counted once per queueCountFor, not per enqueue; from half the
// cap on (with the units queued since the count), every enqueue counts, so
// the cap holds exactly.
func TestQueueCapCountsOnlyNearTheCapOrWhenStale(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sq, clock := openStepStore(t, "acme", "globex")
	st := &countCounter{Store: sq}
	srv, err := New(Options{Store: st, Clock: clock, Limits: Limits{MaxQueuedPerAccount: 8}})
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(i int) error {
		if err := srv.checkQueue(ctx, store.WorkEnqueueParams{Account: "acme"}, "Submit"); err != nil {
			return err
		}
		_, err := sq.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: newID("w_"), Account: "acme", KeyID: 1, SealedCommand: []byte("c"),
			Now: clock.Now(), Deadline: clock.Now().Add(time.Hour)})
		return err
	}
	// 0 queued: counted once; then 1, 2, 3 queued by this replica are
	// below half the cap (4) without counting.
	for i := range 4 {
		if err := enqueue(i); err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
	}
	if n := st.calls.Load(); n != 1 {
		t.Errorf("4 units far below the cap counted the queue %d times, want 1", n)
	}
	// From half the cap on, every enqueue counts, up to the cap exactly.
	for i := 4; i < 8; i++ {
		if err := enqueue(i); err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
	}
	if n := st.calls.Load(); n != 5 {
		t.Errorf("units 5 to 8 counted the queue %d times in all, want 5", n)
	}
	if err := srv.checkQueue(ctx, store.WorkEnqueueParams{Account: "acme"}, "Submit"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("9th unit: %v, want ResourceExhausted", err)
	} else if want := `account "acme" has as many units queued as its limit allows (8, limits.max_queued_per_account)`; !strings.Contains(err.Error(), want) {
		t.Errorf("9th unit: %v, want it to say %q", err, want)
	}

	// A count is trusted only briefly: units queued elsewhere (another
	// replica; here straight into the store) are seen once it is stale.
	if err := srv.checkQueue(ctx, store.WorkEnqueueParams{Account: "globex"}, "Submit"); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		if _, err := sq.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: newID("w_"), Account: "globex", KeyID: 1, SealedCommand: []byte("c"),
			Now: clock.Now(), Deadline: clock.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.checkQueue(ctx, store.WorkEnqueueParams{Account: "globex"}, "Submit"); err != nil {
		t.Fatalf("within the count's second: %v, want it trusted", err)
	}
	clock.add(queueCountFor)
	if err := srv.checkQueue(ctx, store.WorkEnqueueParams{Account: "globex"}, "Submit"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("once the count is stale: %v, want ResourceExhausted (8 units were queued elsewhere)", err)
	}
}

// TestQueueCountOfADeletedAccountIsForgotten: the count checkQueue keeps
// of an account's queue is dropped when the automator finds the account
// deleted, as its keys are: with accounts made and deleted over months, a
// count per account ever seen would only grow.
func TestQueueCountOfADeletedAccountIsForgotten(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sq, clock := openStepStore(t, "acme", "globex")
	srv, err := New(Options{Store: sq, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for _, account := range []string{"acme", "globex"} {
		if err := srv.checkQueue(ctx, store.WorkEnqueueParams{Account: account}, "Submit"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sq.AccountDelete(ctx, store.AccountDeleteParams{Name: "acme", Reason: "account acme was deleted", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	srv.checkDeletions(ctx, map[string]seenDeletion{})
	srv.queued.mu.Lock()
	_, acme := srv.queued.m["acme"]
	_, globex := srv.queued.m["globex"]
	srv.queued.mu.Unlock()
	if acme || !globex {
		t.Errorf("queue counts held after acme was deleted: acme %v, globex %v; want globex's only", acme, globex)
	}
}
