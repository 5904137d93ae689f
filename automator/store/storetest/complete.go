package storetest

import (
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var completeCases = []testCase{
	{"WorkCompleteRecordsTheOutcome", testWorkCompleteRecordsTheOutcome},
	{"WorkCompleteWithAnotherClaimIDIsErrClaimMismatch", testWorkCompleteWithAnotherClaimID},
	{"WorkCompleteOfAQueuedUnitIsErrNotClaimable", testWorkCompleteQueued},
	{"WorkCompleteTwiceIsErrNotClaimable", testWorkCompleteTwice},
	{"WorkCompleteAtOrPastTheDeadlineIsErrNotClaimable", testWorkCompletePastDeadline},
	{"WorkCompleteOfAnUnknownUnitIsErrNotFound", testWorkCompleteUnknown},
	{"WorkCompleteOfAnotherAccountsUnitIsErrNotFound", testWorkCompleteOtherAccount},
	{"WorkCompleteRefusesAStateAClaimerCannotReport", testWorkCompleteRefusesBadState},
}

func testWorkCompleteRecordsTheOutcome(f *fixture) {
	f.account("acme")
	outcomes := []struct {
		state  store.State
		result []byte
		reason string
	}{
		{store.StateSucceeded, []byte{0, 0xff, 'o', 'k', 0}, ""},
		{store.StateFailed, []byte("sealed failure"), "unknown script \"nope.sh\""},
		{store.StateCancelled, nil, "killed on cancel"},
	}
	for i, o := range outcomes {
		id := string(o.state)
		f.enqueue(id, "acme", at(time.Duration(i)*time.Second), at(time.Hour))
		claimed := f.claimOne("acme", "i-1", id, at(time.Minute))

		now := at(time.Hour - time.Microsecond) // the last instant before the deadline
		got, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
			ID:           id,
			ClaimID:      claimed.ClaimID,
			State:        o.state,
			SealedResult: o.result,
			Reason:       o.reason,
			Now:          now,
		})
		if err != nil {
			f.t.Fatalf("WorkComplete as %s: %v", o.state, err)
		}
		want := claimed
		want.State = o.state
		want.SealedResult = o.result
		want.Reason = o.reason
		want.FinishedAt = now
		f.wantWork("WorkComplete as "+id, got, want)
		f.wantWork("WorkGet after completing as "+id, f.get(id), want)
	}
}

func testWorkCompleteWithAnotherClaimID(f *fixture) {
	f.account("acme")
	f.enqueue("w-1", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "w-1", at(time.Minute))

	_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
		ID:      "w-1",
		ClaimID: "someone else's claim",
		State:   store.StateSucceeded,
		Now:     at(2 * time.Minute),
	})
	f.wantErr("WorkComplete with another claim id", err, store.ErrClaimMismatch)
	f.wantWork("WorkGet after the refused result", f.get("w-1"), claimed)

	// The rightful claimer can still complete it.
	f.complete(claimed, at(3*time.Minute))
}

func testWorkCompleteQueued(f *fixture) {
	f.account("acme")
	queued := f.enqueue("w-1", "acme", at(0), at(time.Hour))
	for _, claimID := range []string{"", "made-up"} {
		_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
			ID:      "w-1",
			ClaimID: claimID,
			State:   store.StateSucceeded,
			Now:     at(time.Minute),
		})
		f.wantErr("WorkComplete of a queued unit with claim id "+claimID, err, store.ErrNotClaimable)
	}
	f.wantWork("WorkGet after the refused results", f.get("w-1"), queued)
}

func testWorkCompleteTwice(f *fixture) {
	f.account("acme")
	f.enqueue("w-1", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "w-1", at(time.Minute))
	done := f.complete(claimed, at(2*time.Minute))

	_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
		ID:           "w-1",
		ClaimID:      claimed.ClaimID,
		State:        store.StateFailed,
		SealedResult: []byte("a second result"),
		Reason:       "second",
		Now:          at(3 * time.Minute),
	})
	f.wantErr("second WorkComplete", err, store.ErrNotClaimable)
	f.wantWork("WorkGet after the second result", f.get("w-1"), done)
}

func testWorkCompletePastDeadline(f *fixture) {
	f.account("acme")
	f.enqueue("w-1", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "w-1", at(time.Minute))

	for _, now := range []time.Time{at(time.Hour), at(time.Hour + time.Microsecond), at(2 * time.Hour)} {
		_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
			ID:      "w-1",
			ClaimID: claimed.ClaimID,
			State:   store.StateSucceeded,
			Now:     now,
		})
		f.wantErr("WorkComplete at deadline+"+now.Sub(at(time.Hour)).String(), err, store.ErrNotClaimable)
	}
	f.wantWork("WorkGet after the late results", f.get("w-1"), claimed)
}

func testWorkCompleteUnknown(f *fixture) {
	_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
		ID:      "nope",
		ClaimID: "claim",
		State:   store.StateSucceeded,
		Now:     at(0),
	})
	f.wantErr("WorkComplete of an unknown unit", err, store.ErrNotFound)
}

// testWorkCompleteOtherAccount: a claimer authenticated for one account
// cannot complete (nor learn anything of) another account's unit, even with
// its claim id.
func testWorkCompleteOtherAccount(f *fixture) {
	f.account("acme")
	f.account("globex")
	f.enqueue("w-1", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "w-1", at(time.Minute))

	_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
		ID:      "w-1",
		ClaimID: claimed.ClaimID,
		Account: "globex",
		State:   store.StateSucceeded,
		Now:     at(2 * time.Minute),
	})
	f.wantErr("WorkComplete for another account", err, store.ErrNotFound)
	f.wantWork("WorkGet after the refused result", f.get("w-1"), claimed)

	// Its own account completes it.
	got, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
		ID:      "w-1",
		ClaimID: claimed.ClaimID,
		Account: "acme",
		State:   store.StateSucceeded,
		Now:     at(3 * time.Minute),
	})
	if err != nil {
		f.t.Fatalf("WorkComplete for its own account: %v", err)
	}
	if got.State != store.StateSucceeded {
		f.t.Errorf("WorkComplete for its own account: state %s, want succeeded", got.State)
	}
}

// testWorkCompleteRefusesBadState: a claimer reports succeeded, failed or
// cancelled; timed_out is the automator's verdict, never the claimer's.
func testWorkCompleteRefusesBadState(f *fixture) {
	f.account("acme")
	f.enqueue("w-1", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "w-1", at(time.Minute))

	for _, state := range []store.State{store.StateQueued, store.StateClaimed, store.StateTimedOut, "", "done"} {
		_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
			ID:      "w-1",
			ClaimID: claimed.ClaimID,
			State:   state,
			Now:     at(2 * time.Minute),
		})
		if err == nil {
			f.t.Errorf("WorkComplete with state %q succeeded", state)
		}
	}
	f.wantWork("WorkGet after the refused results", f.get("w-1"), claimed)
}
