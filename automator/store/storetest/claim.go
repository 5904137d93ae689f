package storetest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var claimCases = []testCase{
	{"WorkClaimTakesTheOldestFirst", testWorkClaimOldestFirst},
	{"WorkClaimSetsClaimFields", testWorkClaimSetsClaimFields},
	{"WorkClaimIsNeverBeforeTheUnitWasQueued", testWorkClaimNeverBeforeQueued},
	{"WorkClaimRespectsMax", testWorkClaimRespectsMax},
	{"WorkClaimStopsAtMaxBytesOldestFirst", testWorkClaimStopsAtMaxBytes},
	{"WorkClaimOnlyTakesTheGivenAccount", testWorkClaimOnlyTheGivenAccount},
	{"WorkClaimSkipsUnitsAtOrPastTheirDeadline", testWorkClaimSkipsDueUnits},
	{"WorkClaimNeverTakesAClaimedUnitAgain", testWorkClaimNeverTakesAClaimedUnitAgain},
	{"ClaimIsNeverGivenTwice", testClaimIsNeverGivenTwice},
	// Expect only lets a backend skip a cheap look for an empty queue:
	// every answer stays the same.
	{"WorkClaimExpecting/TakesTheOldestFirst", expecting(testWorkClaimOldestFirst)},
	{"WorkClaimExpecting/OnlyTakesTheGivenAccount", expecting(testWorkClaimOnlyTheGivenAccount)},
	{"WorkClaimExpecting/SkipsUnitsAtOrPastTheirDeadline", expecting(testWorkClaimSkipsDueUnits)},
	{"WorkClaimExpecting/NeverTakesAClaimedUnitAgain", expecting(testWorkClaimNeverTakesAClaimedUnitAgain)},
}

func expecting(run func(f *fixture)) func(f *fixture) {
	return func(f *fixture) {
		f.expect = true
		run(f)
	}
}

func testWorkClaimOldestFirst(f *fixture) {
	f.account("acme")
	// Ids sort the other way round from queue order, so a backend that
	// orders by id fails.
	f.enqueue("c", "acme", at(0), at(time.Hour))
	f.enqueue("a", "acme", at(time.Microsecond), at(time.Hour))
	f.enqueue("b", "acme", at(time.Second), at(time.Hour))

	ws := f.claim("acme", "i-1", 2, at(time.Minute))
	if got := ids(ws); !slices.Equal(got, []string{"c", "a"}) {
		f.t.Fatalf("first WorkClaim claimed %v, want [c a]", got)
	}
	ws = f.claim("acme", "i-2", 5, at(time.Minute))
	if got := ids(ws); !slices.Equal(got, []string{"b"}) {
		f.t.Fatalf("second WorkClaim claimed %v, want [b]", got)
	}
	if ws[0].ClaimID != "i-2-claim-0" {
		f.t.Errorf("second WorkClaim: ClaimID = %q, want the first of its ClaimIDs", ws[0].ClaimID)
	}
}

// testWorkClaimNeverBeforeQueued: a claim whose Now is older than a unit's
// QueuedAt (its caller read the clock before another caller's enqueue, of
// this replica or one whose clock runs ahead, committed; the claim then
// found that unit) records the unit claimed when it was queued, not
// before: `work list`, `work show` and the dashboard never show a unit
// claimed before it was queued.
func testWorkClaimNeverBeforeQueued(f *fixture) {
	f.account("acme")
	f.enqueue("early", "acme", at(0), at(time.Hour))
	late := f.enqueue("late", "acme", at(time.Second), at(time.Hour))
	now := at(time.Second - 3*time.Millisecond)
	ws := f.claim("acme", "i-1", 2, now)
	if got := ids(ws); !slices.Equal(got, []string{"early", "late"}) {
		f.t.Fatalf("WorkClaim claimed %v, want [early late]", got)
	}
	for i, want := range []time.Time{now, late.QueuedAt} {
		if !ws[i].ClaimedAt.Equal(want) {
			f.t.Errorf("WorkClaim: %s queued at %v, ClaimedAt = %v, want %v", ws[i].ID, ws[i].QueuedAt, ws[i].ClaimedAt, want)
		}
		got := f.get(ws[i].ID)
		if !got.ClaimedAt.Equal(want) {
			f.t.Errorf("WorkGet(%s) after the claim: ClaimedAt = %v, want %v", ws[i].ID, got.ClaimedAt, want)
		}
	}
}

func testWorkClaimSetsClaimFields(f *fixture) {
	f.account("acme")
	queued := []store.Work{
		f.enqueue("w-1", "acme", at(0), at(time.Hour)),
		f.enqueue("w-2", "acme", at(time.Second), at(2*time.Hour)),
	}
	now := at(time.Minute + 3*time.Microsecond)
	ws, err := f.s.WorkClaim(f.ctx, store.WorkClaimParams{
		Account:    "acme",
		InstanceID: "host-a",
		Max:        3,
		ClaimIDs:   []string{"claim-x", "claim-y", "claim-z"},
		Now:        now,
	})
	if err != nil {
		f.t.Fatalf("WorkClaim: %v", err)
	}
	if len(ws) != 2 {
		f.t.Fatalf("WorkClaim claimed %v, want [w-1 w-2]", ids(ws))
	}
	for i, q := range queued {
		want := q
		want.State = store.StateClaimed
		want.InstanceID = "host-a"
		want.ClaimID = []string{"claim-x", "claim-y"}[i]
		want.ClaimedAt = now
		f.wantWork(fmt.Sprintf("WorkClaim[%d]", i), ws[i], want)
		f.wantWork("WorkGet of "+q.ID, f.get(q.ID), want)
	}
}

func testWorkClaimRespectsMax(f *fixture) {
	f.account("acme")
	for i := range 5 {
		f.enqueue(fmt.Sprintf("w-%d", i), "acme", at(time.Duration(i)*time.Second), at(time.Hour))
	}
	if ws := f.claim("acme", "i-1", 0, at(time.Minute)); len(ws) != 0 {
		f.t.Errorf("WorkClaim with Max 0 claimed %v", ids(ws))
	}
	if ws := f.claim("acme", "i-1", 3, at(time.Minute)); len(ws) != 3 {
		f.t.Errorf("WorkClaim with Max 3 claimed %v", ids(ws))
	}
	if ws := f.claim("acme", "i-1", 1, at(time.Minute)); len(ws) != 1 {
		f.t.Errorf("WorkClaim with Max 1 claimed %v", ids(ws))
	}
	if ws := f.claim("acme", "i-1", 4, at(time.Minute)); len(ws) != 1 {
		f.t.Errorf("WorkClaim with Max 4 and one unit left claimed %v", ids(ws))
	}
	if ws := f.claim("acme", "i-1", 4, at(time.Minute)); len(ws) != 0 {
		f.t.Errorf("WorkClaim on an empty queue claimed %v", ids(ws))
	}
}

func testWorkClaimOnlyTheGivenAccount(f *fixture) {
	f.account("acme")
	f.account("globex")
	f.enqueue("acme-1", "acme", at(0), at(time.Hour))
	f.enqueue("globex-1", "globex", at(time.Microsecond), at(time.Hour))
	f.enqueue("acme-2", "acme", at(time.Second), at(time.Hour))

	ws := f.claim("acme", "i-1", 10, at(time.Minute))
	if got := ids(ws); !slices.Equal(got, []string{"acme-1", "acme-2"}) {
		f.t.Errorf("WorkClaim for acme claimed %v, want [acme-1 acme-2]", got)
	}
	f.wantState("globex-1", store.StateQueued)
	if ws := f.claim("nobody", "i-1", 10, at(time.Minute)); len(ws) != 0 {
		f.t.Errorf("WorkClaim for an unknown account claimed %v", ids(ws))
	}
}

func testWorkClaimSkipsDueUnits(f *fixture) {
	f.account("acme")
	now := at(time.Minute)
	f.enqueue("past", "acme", at(0), now.Add(-time.Microsecond))
	f.enqueue("at-now", "acme", at(time.Second), now)
	f.enqueue("ahead", "acme", at(2*time.Second), now.Add(time.Microsecond))

	ws := f.claim("acme", "i-1", 10, now)
	if got := ids(ws); !slices.Equal(got, []string{"ahead"}) {
		f.t.Errorf("WorkClaim claimed %v, want [ahead]: a unit whose deadline is at or before Now is not claimable", got)
	}
	f.wantState("past", store.StateQueued)
	f.wantState("at-now", store.StateQueued)
}

func testWorkClaimNeverTakesAClaimedUnitAgain(f *fixture) {
	f.account("acme")
	f.enqueue("w-1", "acme", at(0), at(time.Hour))
	first := f.claimOne("acme", "i-1", "w-1", at(time.Minute))

	for _, instance := range []string{"i-1", "i-2"} {
		if ws := f.claim("acme", instance, 10, at(2*time.Minute)); len(ws) != 0 {
			f.t.Errorf("WorkClaim by %s after the unit was claimed claimed %v", instance, ids(ws))
		}
	}
	f.wantWork("WorkGet after more claims", f.get("w-1"), first)
}

// testClaimIsNeverGivenTwice races claimers of one account until the queue is
// empty: every unit must be claimed exactly once in total, and stored as
// claimed by the claimer that got it.
func testClaimIsNeverGivenTwice(f *fixture) {
	const units, claimers = 500, 8
	f.account("acme")
	for i := range units {
		f.enqueue(fmt.Sprintf("w-%04d", i), "acme", at(time.Duration(i)*time.Microsecond), at(time.Hour))
	}

	type claim struct{ instance, claimID string }
	var (
		mu   sync.Mutex
		got  = map[string][]claim{}
		errs []error
		wg   sync.WaitGroup
	)
	for g := range claimers {
		wg.Go(func() {
			instance := fmt.Sprintf("i-%d", g)
			// Each round claims at least one unit until the queue is empty:
			// more rounds than units means units are claimed again.
			for round := 0; round <= units; round++ {
				max := (g+round)%4 + 1
				want := claimIDs(fmt.Sprintf("%s-round-%d", instance, round), max)
				ws, err := f.s.WorkClaim(f.ctx, store.WorkClaimParams{
					Account:    "acme",
					InstanceID: instance,
					Max:        max,
					ClaimIDs:   want,
					Now:        at(time.Minute),
				})
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: WorkClaim: %w", instance, err))
				}
				if len(ws) > max {
					errs = append(errs, fmt.Errorf("%s: WorkClaim with Max %d claimed %d units", instance, max, len(ws)))
				}
				for i, w := range ws {
					if i < len(want) && w.ClaimID != want[i] {
						errs = append(errs, fmt.Errorf("%s: claimed %s under %q, want %q", instance, w.ID, w.ClaimID, want[i]))
					}
					got[w.ID] = append(got[w.ID], claim{instance, w.ClaimID})
				}
				mu.Unlock()
				if err != nil || len(ws) == 0 {
					return // all units were queued before the race: none left
				}
			}
		})
	}
	wg.Wait()

	for _, err := range errs {
		f.t.Error(err)
	}
	if len(got) != units {
		f.t.Errorf("%d distinct units claimed, want %d", len(got), units)
	}
	wrong := 0
	for i := range units {
		id := fmt.Sprintf("w-%04d", i)
		cs := got[id]
		if len(cs) != 1 {
			if wrong++; wrong <= 10 {
				f.t.Errorf("unit %s claimed %d times: %v", id, len(cs), cs)
			}
			continue
		}
		w := f.get(id)
		if w.State != store.StateClaimed || w.InstanceID != cs[0].instance || w.ClaimID != cs[0].claimID {
			f.t.Errorf("unit %s stored as %s by %q under %q, want claimed by %q under %q",
				id, w.State, w.InstanceID, w.ClaimID, cs[0].instance, cs[0].claimID)
		}
	}
	if wrong > 10 {
		f.t.Errorf("… and %d more units claimed other than once", wrong-10)
	}
}

// testWorkClaimStopsAtMaxBytes: a claim with a byte budget takes units,
// oldest first, while their sealed commands together fit in it, and stops
// at the first that does not (a smaller one behind it does not overtake
// it); the oldest claimable unit is taken whatever its size.
func testWorkClaimStopsAtMaxBytes(f *fixture) {
	f.account("acme")
	// Each sealed command is "sealed command of w-N": 20 bytes.
	for i := range 4 {
		f.enqueue(fmt.Sprintf("w-%d", i), "acme", at(time.Duration(i)*time.Second), at(time.Hour))
	}
	claim := func(instance string, maxBytes int) []string {
		f.t.Helper()
		ws, err := f.s.WorkClaim(f.ctx, store.WorkClaimParams{
			Account: "acme", InstanceID: instance, Max: 4, ClaimIDs: claimIDs(instance+"-claim", 4),
			Now: at(time.Minute), Expect: f.expect, MaxBytes: maxBytes,
		})
		if err != nil {
			f.t.Fatalf("WorkClaim(max bytes %d): %v", maxBytes, err)
		}
		return ids(ws)
	}
	if got := claim("i-1", 59); !slices.Equal(got, []string{"w-0", "w-1"}) {
		f.t.Fatalf("WorkClaim with 59 bytes for 20-byte commands claimed %v, want [w-0 w-1]", got)
	}
	if got := claim("i-2", 5); !slices.Equal(got, []string{"w-2"}) {
		f.t.Fatalf("WorkClaim with 5 bytes claimed %v, want the oldest alone, [w-2]", got)
	}
	if got := claim("i-3", 0); !slices.Equal(got, []string{"w-3"}) {
		f.t.Fatalf("WorkClaim without a byte budget claimed %v, want [w-3]", got)
	}
}
