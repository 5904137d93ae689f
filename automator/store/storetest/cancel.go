package storetest

import (
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var cancelCases = []testCase{
	{"WorkCancelOfAQueuedUnit", testWorkCancelQueued},
	{"WorkCancelOfAClaimedUnit", testWorkCancelClaimed},
	{"WorkCancelOfATerminalUnitReturnsItUnchanged", testWorkCancelTerminal},
	{"WorkCancelOfAnUnknownUnitIsErrNotFound", testWorkCancelUnknown},
	{"WorkCancelPastTheDeadlineLeavesTheUnitToTimeOut", testWorkCancelPastDeadline},
}

// testWorkCancelPastDeadline: a unit whose deadline has passed is due to
// time out, whoever cancels it before the sweep does: it is refused with
// ErrNotClaimable and left as it is, queued or claimed, for WorkExpire.
func testWorkCancelPastDeadline(f *fixture) {
	f.account("acme")
	f.enqueue("claimed", "acme", at(0), at(time.Minute))
	claimed := f.claimOne("acme", "i-1", "claimed", at(time.Second))
	queued := f.enqueue("queued", "acme", at(2*time.Second), at(time.Minute))
	for _, want := range []store.Work{queued, claimed} {
		got, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: want.ID, Reason: "too late", Now: at(time.Minute)})
		f.wantErr("WorkCancel of a "+string(want.State)+" unit at its deadline", err, store.ErrNotClaimable)
		f.wantWork("WorkCancel of a "+string(want.State)+" unit at its deadline", got, want)
		f.wantWork("WorkGet after the refused cancel", f.get(want.ID), want)
	}
	ex, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(time.Minute)})
	if err != nil || len(ex) != 2 {
		f.t.Fatalf("WorkExpire after the refused cancels = %v, %v; want both units timed out", ids(ex), err)
	}
}

func testWorkCancelQueued(f *fixture) {
	f.account("acme")
	queued := f.enqueue("w-1", "acme", at(0), at(time.Hour))

	got, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "w-1", Reason: "caller cancelled", Now: at(time.Minute)})
	if err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}
	want := queued
	want.State = store.StateCancelled
	want.Reason = "caller cancelled"
	want.FinishedAt = at(time.Minute)
	f.wantWork("WorkCancel", got, want)
	f.wantWork("WorkGet after WorkCancel", f.get("w-1"), want)

	if ws := f.claim("acme", "i-1", 1, at(2*time.Minute)); len(ws) != 0 {
		f.t.Errorf("WorkClaim after WorkCancel claimed %v", ids(ws))
	}
}

func testWorkCancelClaimed(f *fixture) {
	f.account("acme")
	f.enqueue("w-1", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "w-1", at(time.Minute))

	got, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "w-1", Reason: "caller cancelled", Now: at(2 * time.Minute)})
	if err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}
	want := claimed // keeps who claimed it, for the record
	want.State = store.StateCancelled
	want.Reason = "caller cancelled"
	want.FinishedAt = at(2 * time.Minute)
	f.wantWork("WorkCancel", got, want)
	f.wantWork("WorkGet after WorkCancel", f.get("w-1"), want)

	// The claimer's late result is refused.
	_, err = f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
		ID:      "w-1",
		ClaimID: claimed.ClaimID,
		State:   store.StateSucceeded,
		Now:     at(3 * time.Minute),
	})
	f.wantErr("WorkComplete after WorkCancel", err, store.ErrNotClaimable)
}

func testWorkCancelTerminal(f *fixture) {
	f.account("acme")
	f.enqueue("done", "acme", at(0), at(time.Hour))
	done := f.complete(f.claimOne("acme", "i-1", "done", at(time.Minute)), at(2*time.Minute))
	f.enqueue("cancelled", "acme", at(time.Second), at(time.Hour))
	cancelled, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "cancelled", Reason: "first", Now: at(time.Minute)})
	if err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}
	f.enqueue("expired", "acme", at(2*time.Second), at(3*time.Minute))
	ex, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(3 * time.Minute)})
	if err != nil || len(ex) != 1 {
		f.t.Fatalf("WorkExpire = %v, %v; want the one unit", ids(ex), err)
	}
	expired := f.get(ex[0].ID) // with its sealed command, which WorkExpire leaves out

	for _, want := range []store.Work{done, cancelled, expired} {
		got, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: want.ID, Reason: "again", Now: at(4 * time.Minute)})
		f.wantErr("WorkCancel of a "+string(want.State)+" unit", err, store.ErrNotClaimable)
		f.wantWork("WorkCancel of a "+string(want.State)+" unit", got, want)
		f.wantWork("WorkGet after the refused cancel", f.get(want.ID), want)
	}
}

func testWorkCancelUnknown(f *fixture) {
	_, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "nope", Reason: "r", Now: at(0)})
	f.wantErr("WorkCancel of an unknown unit", err, store.ErrNotFound)
}
