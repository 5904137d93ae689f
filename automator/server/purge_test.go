package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestPurgeEndedDeletesEndedUnitsPastTheRetention: PurgeEnded deletes every
// ended unit queued more than the retention ago, over as many batches as it
// takes, and keeps younger units and open ones however old.
func TestPurgeEndedDeletesEndedUnitsPastTheRetention(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestPurgeEndedDeletesAPreviousKeyOnceNoUnitNeedsIt: the purge deletes a
// previous key once the units queued before its overlap ended are gone,
// and not before: a unit queued after the rotation, stored under the new
// key, that a proxy of the old profile ran holds a result sealed with the
// old key, and keeps it. Once the key is gone the automator goes on
// sealing, handing out and opening units with the keys that are left.
func TestPurgeEndedDeletesAPreviousKeyOnceNoUnitNeedsIt(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	ctx := t.Context()
	caller, proxy := e.callerClient(), e.proxyClient()
	const retention = 24 * time.Hour
	start := clock.Now()
	set := func(at time.Time) { clock.Advance(at.Sub(clock.Now())) }
	keyIDs := func() []uint32 {
		t.Helper()
		keys, err := e.store.AccountKeys(ctx, e.account)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint32
		for _, k := range keys {
			ids = append(ids, k.KeyID)
		}
		return ids
	}

	submitScript(t, caller, e.account, "before.sh", time.Hour)
	clock.Advance(time.Minute)
	newKey := e.rotateKey(e.account, 2, clock.Now(), clock.Now().Add(time.Hour))
	newKeys := crypto.Keys{newKey, e.key}
	clock.Advance(time.Minute)
	after := submitScript(t, caller, e.account, "after.sh", time.Hour)
	c := claimOne(t, proxy, "new", 2, 1) // before.sh, as stored with key 1
	if err := completeWith(t, proxy, newKeys, c, "new profile ok"); err != nil {
		t.Fatal(err)
	}
	c = claimOne(t, proxy, "old", 1) // after.sh, sealed again with key 1
	if err := completeWith(t, proxy, crypto.Keys{e.key}, c, "old profile ok"); err != nil {
		t.Fatal(err)
	}
	if w, err := e.store.WorkGet(ctx, after.GetWorkId()); err != nil || w.KeyID != 2 {
		t.Fatalf("unit queued after the rotation: key id %d, %v; want 2", w.KeyID, err)
	} else if id, _ := crypto.BlobKeyID(w.SealedResult); id != 1 {
		t.Fatalf("result of the unit queued after the rotation sealed with key %d, want 1 (the old profile's)", id)
	}

	// The unit queued before the rotation is purged; the one after it,
	// whose result key 1 sealed, is not.
	set(start.Add(retention + 90*time.Second))
	if n, err := e.srv.PurgeEnded(ctx, retention); err != nil || n != 1 {
		t.Fatalf("PurgeEnded: %d units, %v; want the unit queued before the rotation", n, err)
	}
	if ids := keyIDs(); !slices.Equal(ids, []uint32{2, 1}) {
		t.Errorf("keys with a unit left whose result key 1 sealed: %v, want [2 1]", ids)
	}
	if st, err := caller.Get(ctx, &automatorv1.GetRequest{WorkId: after.GetWorkId()}); err != nil || string(st.GetResult().GetStdout()) != "old profile ok" {
		t.Fatalf("Get of the unit the old profile ran: %v, %v; want its result", st, err)
	}

	set(start.Add(retention + 3*time.Minute))
	if n, err := e.srv.PurgeEnded(ctx, retention); err != nil || n != 1 {
		t.Fatalf("PurgeEnded: %d units, %v; want the unit queued after the rotation", n, err)
	}
	if ids := keyIDs(); !slices.Equal(ids, []uint32{2}) {
		t.Errorf("keys with no unit left from key 1's time: %v, want [2]", ids)
	}

	// The automator goes on, with a ring read before the purge and with
	// one read after it.
	for _, read := range []string{"before", "after"} {
		if read == "after" {
			clock.Advance(time.Hour) // past the ring's cache
		}
		st := submitScript(t, caller, e.account, "later-"+read+".sh", time.Hour)
		c := claimOne(t, proxy, "new", 2, 1)
		if cmd, id := openWith(t, crypto.Keys{newKey}, c); cmd.GetScript() != "later-"+read+".sh" || id != 2 {
			t.Fatalf("ring read %s the purge: the new profile got %q sealed with key %d, want later-%s.sh with key 2", read, cmd.GetScript(), id, read)
		}
		if err := completeWith(t, proxy, crypto.Keys{newKey}, c, "ok "+read); err != nil {
			t.Fatal(err)
		}
		if got, err := caller.Get(ctx, &automatorv1.GetRequest{WorkId: st.GetWorkId()}); err != nil || string(got.GetResult().GetStdout()) != "ok "+read {
			t.Fatalf("ring read %s the purge: Get: %v, %v", read, got, err)
		}
		if _, err := pollNow(proxy, "old", 1, 1); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("ring read %s the purge: a poll holding only the deleted key: %v, want FailedPrecondition", read, err)
		}
	}
}
