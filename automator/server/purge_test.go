package server_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
