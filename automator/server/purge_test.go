package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
)

// TestPurgeEndedDeletesEndedUnitsPastTheRetention: PurgeEnded deletes every
// ended unit queued more than the retention ago, over as many batches as it
// takes, and keeps younger units and open ones however old.
func TestPurgeEndedDeletesEndedUnitsPastTheRetention(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	ctx := t.Context()
	now := clock.Now()
	enqueue := func(id string, queuedAt time.Time, cancel bool) {
		t.Helper()
		if _, err := e.store.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: e.account, KeyID: 1,
			SealedCommand: []byte("c"), Now: queuedAt, Deadline: now.Add(time.Hour)}); err != nil {
			t.Fatalf("WorkEnqueue %s: %v", id, err)
		}
		if cancel {
			if _, err := e.store.WorkCancel(ctx, store.WorkCancelParams{ID: id, Reason: "test", Now: queuedAt.Add(time.Second)}); err != nil {
				t.Fatalf("WorkCancel %s: %v", id, err)
			}
		}
	}
	// More ended old units than one batch deletes (500), written side by side.
	const old = 1100
	var wg sync.WaitGroup
	for g := range 11 {
		wg.Go(func() {
			for i := range old / 11 {
				enqueue(fmt.Sprintf("w_old_%02d_%03d", g, i), now.Add(-72*time.Hour+time.Duration(g*100+i)*time.Second), true)
			}
		})
	}
	wg.Wait()
	enqueue("w_old_open", now.Add(-72*time.Hour), false)
	enqueue("w_young_ended", now.Add(-23*time.Hour), true)

	n, err := e.srv.PurgeEnded(ctx, 24*time.Hour)
	if err != nil || n != old {
		t.Fatalf("PurgeEnded: %d units, %v; want the %d ended units queued over 24 h ago", n, err, old)
	}
	for id, kept := range map[string]bool{"w_old_00_000": false, "w_old_10_099": false, "w_old_open": true, "w_young_ended": true} {
		_, err := e.store.WorkGet(ctx, id)
		if kept && err != nil || !kept && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unit %s after PurgeEnded: %v; want it kept: %v", id, err, kept)
		}
	}
	if n, err := e.srv.PurgeEnded(ctx, 24*time.Hour); err != nil || n != 0 {
		t.Errorf("a second PurgeEnded: %d units, %v; want none", n, err)
	}
}

// slowPurges is a store whose every WorkPurge takes took on the test's
// clock, and which records, in order, the purges and the pauses between
// them that it is told of.
type slowPurges struct {
	store.Store
	clock *fakeClock
	took  time.Duration

	mu    sync.Mutex
	steps []string
}

func (s *slowPurges) WorkPurge(ctx context.Context, p store.WorkPurgeParams) (int, error) {
	n, err := s.Store.WorkPurge(ctx, p)
	s.clock.Advance(s.took)
	s.mu.Lock()
	s.steps = append(s.steps, fmt.Sprintf("purge %d", n))
	s.mu.Unlock()
	return n, err
}

func (s *slowPurges) pause(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, fmt.Sprintf("pause %v", d))
	return nil
}

// TestPurgeEndedLeavesTheDatabaseIdleBetweenBatches: after each full batch,
// PurgeEnded waits as long as the batch took before it sends the next, so
// the writes of callers and proxies commit in between rather than behind
// the next batch: batches sent back to back had a purge of a large
// history cut every other write's rate twentyfold while it lasted.
func TestPurgeEndedLeavesTheDatabaseIdleBetweenBatches(t *testing.T) {
	clock := newFakeClock()
	var slow *slowPurges
	e := newEnv(t, envOptions{clock: clock, wrap: func(st store.Store) store.Store {
		slow = &slowPurges{Store: st, clock: clock, took: 40 * time.Millisecond}
		return slow
	}})
	e.srv.OnPurgePause(slow.pause)
	ctx := t.Context()
	now := clock.Now()
	units := 2*server.PurgeBatch + 3
	for i := range units {
		id := fmt.Sprintf("w_old_%04d", i)
		if _, err := e.store.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: e.account, KeyID: 1,
			SealedCommand: []byte("c"), Now: now.Add(-72*time.Hour + time.Duration(i)*time.Second), Deadline: now.Add(time.Hour)}); err != nil {
			t.Fatalf("WorkEnqueue %s: %v", id, err)
		}
		if _, err := e.store.WorkCancel(ctx, store.WorkCancelParams{ID: id, Reason: "test", Now: now}); err != nil {
			t.Fatalf("WorkCancel %s: %v", id, err)
		}
	}
	n, err := e.srv.PurgeEnded(ctx, 24*time.Hour)
	if err != nil || n != units {
		t.Fatalf("PurgeEnded: %d units, %v; want %d", n, err, units)
	}
	full := fmt.Sprintf("purge %d", server.PurgeBatch)
	want := []string{full, "pause 40ms", full, "pause 40ms", "purge 3"}
	if got := slow.steps; !slices.Equal(got, want) {
		t.Errorf("PurgeEnded's steps: %q; want %q (each full batch followed by a pause as long as it took)", got, want)
	}
}
