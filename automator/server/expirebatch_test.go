package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

// expiries records each WorkExpire the server makes: its Max and how many
// units it timed out.
type expiries struct {
	store.Store
	mu    sync.Mutex
	calls []expiry
	total int
}

type expiry struct{ max, n int }

func (e *expiries) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	ws, err := e.Store.WorkExpire(ctx, p)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, expiry{p.Max, len(ws)})
	e.total += len(ws)
	return ws, err
}

func (e *expiries) seen() ([]expiry, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]expiry(nil), e.calls...), e.total
}

// TestABacklogOfDueUnitsIsTimedOutInBatches: units that fall due together
// by the thousand (an automator started again after minutes down, a queue
// filled while its proxies were away) are timed out a batch per write, one
// batch after the other, so the writes of callers and proxies go on
// between them. All of them in one write held SQLite's writer for minutes
// on a hundred thousand units, and grew the automator by gigabytes.
func TestABacklogOfDueUnitsIsTimedOutInBatches(t *testing.T) {
	t.Parallel()
	var rec *expiries
	e := newEnv(t, envOptions{sweepInterval: 20 * time.Millisecond, wrap: func(st store.Store) store.Store {
		rec = &expiries{Store: st}
		return rec
	}})
	const due = 2*server.ExpireBatch + 88
	now := time.Now()
	for i := range due {
		if _, err := e.store.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: fmt.Sprintf("w-%04d", i), Account: e.account, KeyID: 1,
			SealedCommand: []byte("c"), Now: now.Add(-time.Minute), Deadline: now.Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	waittest.Until(t, fmt.Sprintf("the sweeper to time out all %d units due", due), func() bool { _, n := rec.seen(); return n == due })
	calls, _ := rec.seen()
	batches := 0
	for _, c := range calls {
		if c.max != server.ExpireBatch || c.n > c.max {
			t.Fatalf("an expiry of Max %d timed out %d units; want each of Max %d (all of them: %v)", c.max, c.n, server.ExpireBatch, calls)
		}
		if c.n > 0 {
			batches++
		}
	}
	if batches < 3 {
		t.Errorf("%d units timed out in %d writes, want at least 3 of at most %d each: %v", due, batches, server.ExpireBatch, calls)
	}
}
