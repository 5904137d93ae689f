package storetest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var expireCases = []testCase{
	{"WorkExpireTimesOutDueOpenUnitsOnly", testWorkExpireDueOpenUnitsOnly},
	{"WorkExpireRespectsMax", testWorkExpireRespectsMax},
}

func testWorkExpireDueOpenUnitsOnly(f *fixture) {
	f.account("acme")
	now := at(10 * time.Minute)

	// Terminal units past their deadline stay as they are.
	f.enqueue("done", "acme", at(0), at(5*time.Minute))
	done := f.complete(f.claimOne("acme", "host-a", "done", at(time.Second)), at(2*time.Second))
	f.enqueue("cancelled", "acme", at(time.Second), at(5*time.Minute))
	cancelled, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "cancelled", Reason: "caller cancelled", Now: at(2 * time.Second)})
	if err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}

	// Open units: due ones (deadline before or at now) and ones still ahead.
	f.enqueue("claimed-due", "acme", at(2*time.Second), at(5*time.Minute))
	claimedDue := f.claimOne("acme", "host-b", "claimed-due", at(3*time.Second+5*time.Microsecond))
	f.enqueue("claimed-ahead", "acme", at(3*time.Second), now.Add(time.Microsecond))
	claimedAhead := f.claimOne("acme", "host-c", "claimed-ahead", at(4*time.Second))
	queuedDue := f.enqueue("queued-due", "acme", at(5*time.Second), at(6*time.Minute))
	queuedAtNow := f.enqueue("queued-at-now", "acme", at(6*time.Second), now)
	queuedAhead := f.enqueue("queued-ahead", "acme", at(7*time.Second), at(time.Hour))

	got, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now})
	if err != nil {
		f.t.Fatalf("WorkExpire: %v", err)
	}
	byID := map[string]store.Work{}
	for _, w := range got {
		byID[w.ID] = w
	}
	gotIDs := ids(got)
	slices.Sort(gotIDs)
	if !slices.Equal(gotIDs, []string{"claimed-due", "queued-at-now", "queued-due"}) {
		f.t.Fatalf("WorkExpire changed %v, want [claimed-due queued-at-now queued-due]", gotIDs)
	}

	for _, before := range []store.Work{claimedDue, queuedDue, queuedAtNow} {
		w := byID[before.ID]
		want := before
		want.State = store.StateTimedOut
		want.FinishedAt = now
		want.Reason = w.Reason // checked below
		f.wantWork("WorkExpire", w, want)
		f.wantWork("WorkGet after WorkExpire", f.get(before.ID), w)
	}

	// The reason says whether the unit was ever claimed, and by whom.
	if r := byID["queued-due"].Reason; !strings.Contains(r, "no instance claimed it") {
		f.t.Errorf("reason for a unit never claimed = %q, want it to say no instance claimed it", r)
	}
	if r := byID["claimed-due"].Reason; !strings.Contains(r, "claimed by instance host-b") ||
		!strings.Contains(r, "no result before the deadline") {
		f.t.Errorf("reason for a claimed unit = %q, want it to name instance host-b and say no result came", r)
	}

	for _, w := range []store.Work{done, cancelled, claimedAhead, queuedAhead} {
		f.wantWork("WorkGet of a unit WorkExpire must not touch", f.get(w.ID), w)
	}

	again, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now})
	if err != nil {
		f.t.Fatalf("second WorkExpire: %v", err)
	}
	if len(again) != 0 {
		f.t.Errorf("second WorkExpire at the same time changed %v", ids(again))
	}
}

func testWorkExpireRespectsMax(f *fixture) {
	f.account("acme")
	const due = 5
	for i := range due {
		f.enqueue(fmt.Sprintf("w-%d", i), "acme", at(time.Duration(i)*time.Second), at(time.Minute+time.Duration(i)*time.Second))
	}
	f.claim("acme", "i-1", 2, at(10*time.Second))
	now := at(time.Hour)

	seen := map[string]int{}
	first, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, Max: 2})
	if err != nil {
		f.t.Fatalf("WorkExpire with Max 2: %v", err)
	}
	if len(first) != 2 {
		f.t.Errorf("WorkExpire with Max 2 changed %v", ids(first))
	}
	rest, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, Max: 0})
	if err != nil {
		f.t.Fatalf("WorkExpire with Max 0: %v", err)
	}
	for _, w := range slices.Concat(first, rest) {
		seen[w.ID]++
		if w.State != store.StateTimedOut {
			f.t.Errorf("WorkExpire returned %s in state %s", w.ID, w.State)
		}
	}
	if len(seen) != due || len(first)+len(rest) != due {
		f.t.Errorf("WorkExpire with Max 2 then without bound changed %v then %v, want each of the %d units once", ids(first), ids(rest), due)
	}
	for i := range due {
		f.wantState(fmt.Sprintf("w-%d", i), store.StateTimedOut)
	}
}
