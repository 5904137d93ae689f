package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var expireCases = []testCase{
	{"WorkExpireTimesOutDueOpenUnitsOnly", testWorkExpireDueOpenUnitsOnly},
	{"WorkExpireRespectsMax", testWorkExpireRespectsMax},
	{"WorkExpireTimesOutTheUnitItNamesBeyondMax", testWorkExpireNamedUnit},
	{"ConcurrentSweepersNeverExpireAUnitTwice", testConcurrentSweepers},
	{"AUnitEndsOnceWhenItsResultRacesItsDeadline", testResultRacesDeadline},
	{"WorkExpireSaysWhatTheInstancesOfAnUnclaimedUnitsAccountWereDoing", testExpireReasonNamesInstances},
	{"WorkExpireNamesTheInstancesRefusedForAnExpiredTokenWithTheirCause", testExpireReasonNamesTokenExpired},
	{"WorkExpireNamesTheInstancesRefusedForAWrongKeyWithTheirCause", testExpireReasonNamesWrongKey},
}

// testExpireReasonNamesInstances: the reason of a unit no instance claimed
// says, from the instances the store holds at the expiry, why: the account
// has none, none was online (naming the latest few: stopped, or when they
// last polled), or how many were online and still did not claim it, and
// how many units of the account those were running (not counting those of
// an instance not online); the
// instances that poll but are refused for want of a usable key are named
// first, with the fix. Both backends give it in the same words. A claimed
// unit's reason names its claimer as before.
func testExpireReasonNamesInstances(f *fixture) {
	now := at(time.Hour)
	onlineSince := now.Add(-time.Minute)
	for _, a := range []string{"acme", "globex", "hooli", "initech", "umbrella", "stark", "wayne"} {
		f.account(a)
	}
	seen := func(account, id string, polled time.Duration, stopping bool) {
		f.seen(store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id + ".example", Version: "v1", Stopping: stopping, Now: at(polled)})
	}
	// refused records a poll refused for want of a usable key.
	refused := func(account, id string, polled time.Duration) {
		f.seen(store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id + ".example", Version: "v1", RefusedKeyIDs: []uint32{1}, Now: at(polled)})
	}
	// acme: no instance has polled.
	// globex: five instances, none online: one stopped at its last poll
	// (however recent), four that polled too long ago.
	seen("globex", "g-stopped", 59*time.Minute+30*time.Second, true)
	seen("globex", "g-old", 40*time.Minute, false)
	seen("globex", "g-older", 30*time.Minute, false)
	seen("globex", "g-oldest", 20*time.Minute, false)
	seen("globex", "g-ancient", 10*time.Minute, false)
	// hooli: one instance, long gone.
	seen("hooli", "h-1", 5*time.Minute, false)
	// initech: two online (one polled at onlineSince exactly), one
	// stopped, one that polled a second too early.
	seen("initech", "i-1", 59*time.Minute, false)
	seen("initech", "i-2", 59*time.Minute+50*time.Second, false)
	seen("initech", "i-3", 59*time.Minute+59*time.Second, true)
	seen("initech", "i-4", 58*time.Minute+59*time.Second, false)
	// umbrella: one online, and one that polls and is refused, named
	// though it polled before the other.
	seen("umbrella", "u-1", 59*time.Minute+10*time.Second, false)
	refused("umbrella", "u-refused", 59*time.Minute+5*time.Second)
	// stark: none online: one refused, named first though it polled
	// before the others; one stopped; one long gone, refused at its last
	// poll, named as it last polled; and one more not named.
	refused("stark", "s-refused", 59*time.Minute+20*time.Second)
	seen("stark", "s-stopped", 59*time.Minute+40*time.Second, true)
	refused("stark", "s-gone", 30*time.Minute)
	seen("stark", "s-older", 20*time.Minute, false)
	// wayne: four refused, three named.
	for i, id := range []string{"w-1", "w-2", "w-3", "w-4"} {
		refused("wayne", id, 59*time.Minute+time.Duration(i)*time.Second)
	}

	for _, u := range []struct{ id, account string }{
		{"acme-1", "acme"}, {"globex-1", "globex"}, {"globex-2", "globex"}, {"hooli-1", "hooli"},
		{"initech-1", "initech"}, {"umbrella-1", "umbrella"}, {"stark-1", "stark"}, {"wayne-1", "wayne"},
	} {
		f.enqueue(u.id, u.account, at(2*time.Second), at(30*time.Minute))
	}
	f.enqueue("initech-claimed", "initech", at(time.Second), at(50*time.Minute))
	f.claimOne("initech", "i-1", "initech-claimed", at(3*time.Second))
	// What initech's online instances were doing: running these two
	// (one timing out now); the unit of i-4, not online, is not counted.
	f.enqueue("initech-running", "initech", at(1500*time.Millisecond), at(2*time.Hour))
	f.claimOne("initech", "i-2", "initech-running", at(3*time.Second))
	f.enqueue("initech-offline", "initech", at(1600*time.Millisecond), at(2*time.Hour))
	f.claimOne("initech", "i-4", "initech-offline", at(3*time.Second))

	got, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, OnlineSince: onlineSince})
	if err != nil {
		f.t.Fatalf("WorkExpire: %v", err)
	}
	if len(got) != 9 {
		f.t.Fatalf("WorkExpire changed %v, want the 9 units", ids(got))
	}
	const unclaimed = "no instance claimed it before the deadline"
	want := map[string]string{
		"acme-1": unclaimed + ": account acme has no proxy instance (none has polled in 30 days, if ever); start one with the account's profile",
		"globex-1": unclaimed + ": no instance of account globex was online (g-stopped stopped at 2026-01-02T04:03:35Z; " +
			"g-old last polled at 2026-01-02T03:44:05Z; g-older last polled at 2026-01-02T03:34:05Z; and 2 more)",
		"hooli-1":    unclaimed + ": no instance of account hooli was online (h-1 last polled at 2026-01-02T03:09:05Z)",
		"initech-1":  unclaimed + " (2 instances online, running 2 of the account's units)",
		"umbrella-1": unclaimed + " (1 instance online; instance u-refused polls but holds no usable key: install the account's latest profile)",
		"stark-1": unclaimed + ": no instance of account stark was online (instance s-refused polls but holds no usable key: install the account's latest profile; " +
			"s-stopped stopped at 2026-01-02T04:03:45Z; s-gone last polled at 2026-01-02T03:34:05Z; and 1 more)",
		"wayne-1":         unclaimed + ": no instance of account wayne was online (instances w-4, w-3, w-2 and 1 more poll but hold no usable key: install the account's latest profile)",
		"initech-claimed": "claimed by instance i-1 at 2026-01-02T03:04:08.678901Z, no result before the deadline",
	}
	want["globex-2"] = want["globex-1"]
	for _, w := range got {
		if w.Reason != want[w.ID] {
			f.t.Errorf("reason of %s = %q\nwant %q", w.ID, w.Reason, want[w.ID])
		}
		if stored := f.get(w.ID).Reason; stored != w.Reason {
			f.t.Errorf("WorkGet(%s).Reason = %q, WorkExpire returned %q", w.ID, stored, w.Reason)
		}
	}
}

// testExpireReasonNamesTokenExpired: the instances that poll but are
// refused because their account token expired (a whole profile of before
// a key rotation) are named first with that cause, apart from those
// refused for want of a usable key.
func testExpireReasonNamesTokenExpired(f *fixture) {
	now := at(time.Hour)
	for _, a := range []string{"acme", "globex"} {
		f.account(a)
	}
	poll := func(account, id string, polled time.Duration, expired bool, keyIDs []uint32) {
		f.seen(store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id + ".example", Version: "v1",
			TokenExpired: expired, RefusedKeyIDs: keyIDs, Now: at(polled)})
	}
	// acme: one refused for its token, one gone.
	poll("acme", "a-old", 59*time.Minute+30*time.Second, true, nil)
	poll("acme", "a-gone", 30*time.Minute, false, nil)
	// globex: one online, one refused for want of a key, two for their
	// token.
	poll("globex", "g-1", 59*time.Minute+50*time.Second, false, nil)
	poll("globex", "g-key", 59*time.Minute+10*time.Second, false, []uint32{1})
	poll("globex", "g-old-1", 59*time.Minute+20*time.Second, true, nil)
	poll("globex", "g-old-2", 59*time.Minute+30*time.Second, true, nil)
	f.enqueue("acme-1", "acme", at(2*time.Second), at(30*time.Minute))
	f.enqueue("globex-1", "globex", at(2*time.Second), at(30*time.Minute))

	got, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, OnlineSince: now.Add(-time.Minute)})
	if err != nil {
		f.t.Fatalf("WorkExpire: %v", err)
	}
	const unclaimed = "no instance claimed it before the deadline"
	want := map[string]string{
		"acme-1": unclaimed + ": no instance of account acme was online (instance a-old polls but its account token expired: install the account's latest profile; " +
			"a-gone last polled at 2026-01-02T03:34:05Z)",
		"globex-1": unclaimed + " (1 instance online; instance g-key polls but holds no usable key: install the account's latest profile; " +
			"instances g-old-2, g-old-1 poll but their account token expired: install the account's latest profile)",
	}
	if len(got) != len(want) {
		f.t.Fatalf("WorkExpire changed %v, want the %d units", ids(got), len(want))
	}
	for _, w := range got {
		if w.Reason != want[w.ID] {
			f.t.Errorf("reason of %s = %q\nwant %q", w.ID, w.Reason, want[w.ID])
		}
	}
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
		f.wantWork("WorkGet after WorkExpire", f.get(before.ID), want)
		want.SealedCommand = nil // left out of what WorkExpire returns
		f.wantWork("WorkExpire", w, want)
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

// testConcurrentSweepers runs several sweepers at once, as several automator
// replicas do: each due unit is expired by exactly one of them.
func testConcurrentSweepers(f *fixture) {
	const units, sweepers = 80, 6
	f.account("acme")
	for i := range units {
		f.enqueue(fmt.Sprintf("w-%03d", i), "acme", at(time.Duration(i)*time.Microsecond), at(time.Minute+time.Duration(i)*time.Microsecond))
	}
	f.claim("acme", "host-a", units/3, at(time.Second))
	now := at(time.Hour)

	var (
		mu   sync.Mutex
		got  = map[string]int{}
		errs []error
		wg   sync.WaitGroup
	)
	for range sweepers {
		wg.Go(func() {
			// Each sweep expires at least one unit until none is left:
			// more sweeps than units means units are expired again.
			for sweep := 0; sweep <= units; sweep++ {
				ws, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, Max: 3})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, w := range ws {
					got[w.ID]++
				}
				mu.Unlock()
				if err != nil || len(ws) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		f.t.Errorf("WorkExpire: %v", err)
	}
	// A sweeper that found nothing left while others still held rows may
	// stop early; whatever is left, one more sweep takes.
	rest, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now})
	if err != nil {
		f.t.Fatalf("final WorkExpire: %v", err)
	}
	for _, w := range rest {
		got[w.ID]++
	}
	if len(got) != units {
		f.t.Errorf("%d distinct units expired, want %d", len(got), units)
	}
	for id, n := range got {
		if n != 1 {
			f.t.Errorf("unit %s expired %d times, want once", id, n)
		}
	}
}

// testResultRacesDeadline: claimers post results while sweepers expire the
// same units. Each unit ends exactly once: either its result is recorded or
// it times out, never both, and the stored state says which.
func testResultRacesDeadline(f *fixture) {
	const units = 60
	f.account("acme")
	deadline := at(time.Minute)
	for i := range units {
		f.enqueue(fmt.Sprintf("w-%03d", i), "acme", at(time.Duration(i)*time.Microsecond), deadline)
	}
	claimed := f.claim("acme", "host-a", units, at(time.Second))
	if len(claimed) != units {
		f.t.Fatalf("claimed %d units, want %d", len(claimed), units)
	}

	var (
		mu        sync.Mutex
		completed = map[string]bool{}
		expired   = map[string]int{}
		errs      []error
		wg        sync.WaitGroup
	)
	// The result is posted at the last instant before the deadline; the
	// sweep runs at the deadline.
	for half := range 2 {
		wg.Go(func() {
			for i := half; i < units; i += 2 {
				w := claimed[i]
				_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
					ID: w.ID, ClaimID: w.ClaimID, State: store.StateSucceeded,
					SealedResult: []byte("r"), Now: deadline.Add(-time.Microsecond),
				})
				mu.Lock()
				switch {
				case err == nil:
					completed[w.ID] = true
				case !errors.Is(err, store.ErrNotClaimable):
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			// Each sweep expires at least one unit until none is left:
			// more sweeps than units means units are expired again.
			for sweep := 0; sweep <= units; sweep++ {
				ws, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: deadline, Max: 2})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, w := range ws {
					expired[w.ID]++
				}
				mu.Unlock()
				if err != nil || len(ws) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		f.t.Errorf("unexpected error: %v", err)
	}
	for _, w := range claimed {
		got := f.get(w.ID)
		switch {
		case completed[w.ID] && expired[w.ID] > 0:
			f.t.Errorf("unit %s was both completed and expired", w.ID)
		case expired[w.ID] > 1:
			f.t.Errorf("unit %s expired %d times", w.ID, expired[w.ID])
		case completed[w.ID] && got.State != store.StateSucceeded:
			f.t.Errorf("unit %s was completed but is stored as %s", w.ID, got.State)
		case expired[w.ID] == 1 && got.State != store.StateTimedOut:
			f.t.Errorf("unit %s was expired but is stored as %s", w.ID, got.State)
		case !completed[w.ID] && expired[w.ID] == 0 && got.State != store.StateClaimed:
			f.t.Errorf("unit %s neither completed nor expired, but is stored as %s", w.ID, got.State)
		}
	}
}

// testExpireReasonNamesWrongKey: the instances that poll but are refused
// because a key they hold is not the account's key of its id (another
// account's key line) are named first with that cause, apart from those
// refused for want of a usable key.
func testExpireReasonNamesWrongKey(f *fixture) {
	now := at(time.Hour)
	for _, a := range []string{"acme", "globex"} {
		f.account(a)
	}
	poll := func(account, id string, polled time.Duration, wrong bool, keyIDs []uint32) {
		f.seen(store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id + ".example", Version: "v1",
			WrongKey: wrong, RefusedKeyIDs: keyIDs, Now: at(polled)})
	}
	// acme: one refused for a wrong key, one gone.
	poll("acme", "a-wrong", 59*time.Minute+30*time.Second, true, []uint32{1})
	poll("acme", "a-gone", 30*time.Minute, false, nil)
	// globex: one online, one refused for want of a key, one for a wrong
	// key.
	poll("globex", "g-1", 59*time.Minute+50*time.Second, false, nil)
	poll("globex", "g-key", 59*time.Minute+10*time.Second, false, []uint32{1})
	poll("globex", "g-wrong", 59*time.Minute+20*time.Second, true, []uint32{1})
	f.enqueue("acme-1", "acme", at(2*time.Second), at(30*time.Minute))
	f.enqueue("globex-1", "globex", at(2*time.Second), at(30*time.Minute))

	got, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, OnlineSince: now.Add(-time.Minute)})
	if err != nil {
		f.t.Fatalf("WorkExpire: %v", err)
	}
	const unclaimed = "no instance claimed it before the deadline"
	const wrongKey = "polls but holds a key that is not the account's (another account's, or a mistyped one): install the account's latest profile"
	want := map[string]string{
		"acme-1": unclaimed + ": no instance of account acme was online (instance a-wrong " + wrongKey + "; " +
			"a-gone last polled at 2026-01-02T03:34:05Z)",
		"globex-1": unclaimed + " (1 instance online; instance g-key polls but holds no usable key: install the account's latest profile; " +
			"instance g-wrong " + wrongKey + ")",
	}
	if len(got) != len(want) {
		f.t.Fatalf("WorkExpire changed %v, want the %d units", ids(got), len(want))
	}
	for _, w := range got {
		if w.Reason != want[w.ID] {
			f.t.Errorf("reason of %s = %q\nwant %q", w.ID, w.Reason, want[w.ID])
		}
	}
}

// testWorkExpireNamedUnit: WorkExpire with ID times that unit out too, when
// it is due, beyond Max and whatever falls due before it: a call about it
// (its result, a cancel, a caller waiting at its deadline) ends it then,
// behind a backlog. A unit not yet due, ended already, or not there, is
// not; nor is it timed out twice when the batch holds it.
func testWorkExpireNamedUnit(f *fixture) {
	f.account("acme")
	for i := range 5 {
		f.enqueue(fmt.Sprintf("w-%d", i), "acme", at(time.Duration(i)*time.Second), at(time.Minute+time.Duration(i)*time.Second))
	}
	f.enqueue("w-named", "acme", at(10*time.Second), at(2*time.Minute))
	f.claim("acme", "i-1", 1, at(20*time.Second)) // w-0, claimed
	f.enqueue("w-later", "acme", at(11*time.Second), at(2*time.Hour))
	f.enqueue("w-ended", "acme", at(12*time.Second), at(3*time.Minute))
	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "w-ended", Reason: "cancelled", Now: at(13 * time.Second)}); err != nil {
		f.t.Fatalf("WorkCancel(w-ended): %v", err)
	}
	now := at(time.Hour)

	got, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, Max: 2, ID: "w-named"})
	if err != nil {
		f.t.Fatalf("WorkExpire(Max 2, ID w-named): %v", err)
	}
	if got := slices.Sorted(slices.Values(ids(got))); !slices.Equal(got, []string{"w-0", "w-1", "w-named"}) {
		f.t.Errorf("WorkExpire(Max 2, ID w-named) timed out %v; want the two earliest due and w-named", got)
	}
	f.wantState("w-named", store.StateTimedOut)
	for _, id := range []string{"w-later", "w-ended", "w-nowhere"} {
		got, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, Max: 1, ID: id})
		if err != nil {
			f.t.Fatalf("WorkExpire(Max 1, ID %s): %v", id, err)
		}
		if len(got) != 1 || got[0].ID == id {
			f.t.Errorf("WorkExpire(Max 1, ID %s) timed out %v; want one of the others due, not %s", id, ids(got), id)
		}
	}
	f.wantState("w-later", store.StateQueued)
	f.wantState("w-ended", store.StateCancelled)
	got, err = f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: now, Max: 5, ID: "w-later"})
	if err != nil || len(got) != 0 {
		f.t.Errorf("WorkExpire once every due unit ended = %v, %v; want none", ids(got), err)
	}
}
