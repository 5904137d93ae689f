package storetest

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var purgeCases = []testCase{
	{"WorkPurgeDeletesOldEndedUnitsOnly", testWorkPurgeOldEndedOnly},
	{"WorkPurgeDeletesOldestFirstUpToMax", testWorkPurgeOldestFirst},
}

// exists reports whether unit id is still in the store.
func (f *fixture) exists(id string) bool {
	f.t.Helper()
	_, err := f.s.WorkGet(f.ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		f.t.Fatalf("WorkGet %s: %v", id, err)
	}
	return err == nil
}

func (f *fixture) purge(before time.Time, max int) int {
	f.t.Helper()
	n, err := f.s.WorkPurge(f.ctx, store.WorkPurgeParams{QueuedBefore: before, Max: max})
	if err != nil {
		f.t.Fatalf("WorkPurge: %v", err)
	}
	return n
}

func testWorkPurgeOldEndedOnly(f *fixture) {
	f.account("acme")
	f.account("other")
	cut := at(time.Hour)
	// Before the cut: every terminal state of two accounts, and open units.
	f.complete(f.claimOne("acme", "host-a", f.enqueue("succeeded", "acme", at(0), at(2*time.Hour)).ID, at(time.Second)), at(2*time.Second))
	f.complete(f.claimOne("other", "host-b", f.enqueue("other-succeeded", "other", at(time.Second), at(2*time.Hour)).ID, at(2*time.Second)), at(3*time.Second))
	failed := f.claimOne("acme", "host-a", f.enqueue("failed", "acme", at(2*time.Second), at(2*time.Hour)).ID, at(3*time.Second))
	if _, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{ID: failed.ID, ClaimID: failed.ClaimID, Account: "acme", State: store.StateFailed, Reason: "unknown script", Now: at(4 * time.Second)}); err != nil {
		f.t.Fatalf("WorkComplete failed: %v", err)
	}
	f.enqueue("cancelled", "acme", at(3*time.Second), at(2*time.Hour))
	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "cancelled", Reason: "caller cancelled", Now: at(4 * time.Second)}); err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}
	f.enqueue("timed-out", "acme", at(4*time.Second), at(5*time.Second))
	if _, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(5 * time.Second)}); err != nil {
		f.t.Fatalf("WorkExpire: %v", err)
	}
	f.enqueue("claimed-old", "acme", at(5*time.Second), at(3*time.Hour))
	f.claimOne("acme", "host-a", "claimed-old", at(6*time.Second))
	f.enqueue("queued-old", "other", at(6*time.Second), at(3*time.Hour))
	// At and after the cut: ended, but too young.
	f.complete(f.claimOne("acme", "host-a", f.enqueue("succeeded-at-cut", "acme", cut, at(2*time.Hour)).ID, cut.Add(time.Second)), cut.Add(2*time.Second))
	f.complete(f.claimOne("acme", "host-a", f.enqueue("succeeded-young", "acme", cut.Add(time.Minute), at(2*time.Hour)).ID, cut.Add(2*time.Minute)), cut.Add(3*time.Minute))

	if n := f.purge(cut, 100); n != 5 {
		f.t.Errorf("WorkPurge deleted %d units, want the 5 ended before the cut", n)
	}
	for _, id := range []string{"succeeded", "other-succeeded", "failed", "cancelled", "timed-out"} {
		if f.exists(id) {
			f.t.Errorf("unit %s, ended and queued before the cut, is still there", id)
		}
	}
	for _, id := range []string{"queued-old", "claimed-old", "succeeded-at-cut", "succeeded-young"} {
		if !f.exists(id) {
			f.t.Errorf("unit %s was deleted; want open units and units queued at or after the cut kept", id)
		}
	}
	if n := f.purge(cut, 100); n != 0 {
		f.t.Errorf("a second WorkPurge deleted %d units, want 0", n)
	}
}

func testWorkPurgeOldestFirst(f *fixture) {
	f.account("acme")
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("u%d", i)
		f.enqueue(id, "acme", at(time.Duration(5-i)*time.Second), at(time.Hour)) // each queued before the last
		f.complete(f.claimOne("acme", "host-a", id, at(10*time.Second)), at(11*time.Second))
		ids = append(ids, id)
	}
	if n := f.purge(at(time.Minute), 2); n != 2 {
		f.t.Fatalf("WorkPurge with Max 2 deleted %d units", n)
	}
	var left []string
	for _, id := range ids {
		if f.exists(id) {
			left = append(left, id)
		}
	}
	if want := ids[:3]; !slices.Equal(left, want) {
		f.t.Errorf("after WorkPurge with Max 2: %v left, want the three queued last %v", left, want)
	}
}
