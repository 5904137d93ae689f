package storetest

import (
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// A unit handed straight to a waiting poll is stored already claimed.
var handoffCases = []testCase{
	{"WorkEnqueueClaimedStoresTheClaim", testWorkEnqueueClaimed},
	{"WorkEnqueueClaimedWithTakenIDOrUsedKeyChangesNothing", testWorkEnqueueClaimedRefused},
	{"WorkClaimedByPollsFindsTheUnitsStillClaimedForThosePolls", testWorkClaimedByPolls},
}

func testWorkEnqueueClaimed(f *fixture) {
	f.account("acme")
	now := at(time.Minute)
	got := f.enqueueFor("w-1", "acme", now, now.Add(time.Hour), &store.ClaimRef{InstanceID: "i-1", ClaimID: "claim-1"})
	want := store.Work{
		ID: "w-1", Account: "acme", State: store.StateClaimed, KeyID: 7,
		SealedCommand: []byte("sealed command of w-1"),
		QueuedAt:      now, Deadline: now.Add(time.Hour), ClaimedAt: now,
		InstanceID: "i-1", ClaimID: "claim-1",
	}
	f.wantWork("WorkEnqueue claimed", got, want)
	f.wantWork("WorkGet of a unit enqueued claimed", f.get("w-1"), want)
	// Nobody else can claim it; its claimer completes it as usual.
	if ws := f.claim("acme", "i-2", 10, now.Add(time.Second)); len(ws) != 0 {
		f.t.Errorf("WorkClaim after a unit was enqueued claimed took %v", ids(ws))
	}
	if done := f.complete(got, now.Add(2*time.Second)); done.State != store.StateSucceeded {
		f.t.Errorf("WorkComplete under the enqueued claim: state %s, want succeeded", done.State)
	}
}

func testWorkEnqueueClaimedRefused(f *fixture) {
	f.account("acme")
	first := f.enqueue("w-1", "acme", at(0), at(time.Hour))
	_, err := f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{
		ID: "w-1", Account: "acme", KeyID: 7, SealedCommand: []byte("x"), Now: at(time.Second), Deadline: at(time.Hour),
		ClaimFor: &store.ClaimRef{InstanceID: "i-1", ClaimID: "claim-1"},
	})
	f.wantErr("WorkEnqueue claimed with a taken id", err, store.ErrExists)
	f.wantWork("WorkGet after a refused claimed enqueue", f.get("w-1"), first)

	keyed := func(id string, claim *store.ClaimRef) store.WorkEnqueueParams {
		p := store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 7, SealedCommand: []byte("x"),
			Now: at(time.Second), Deadline: at(time.Hour), IdempotencyKey: "k", IdempotencySince: at(0), ClaimFor: claim}
		return p
	}
	kept, err := f.s.WorkEnqueue(f.ctx, keyed("w-2", nil))
	if err != nil {
		f.t.Fatalf("WorkEnqueue with a key: %v", err)
	}
	dup, err := f.s.WorkEnqueue(f.ctx, keyed("w-3", &store.ClaimRef{InstanceID: "i-1", ClaimID: "claim-3"}))
	f.wantErr("WorkEnqueue claimed with a used key", err, store.ErrDuplicate)
	f.wantWork("WorkEnqueue claimed with a used key: the unit returned", dup, kept)
	f.wantWork("WorkGet of the key's unit", f.get("w-2"), kept)
	if _, err := f.s.WorkGet(f.ctx, "w-3"); err == nil {
		f.t.Errorf("WorkGet(w-3): a refused claimed enqueue stored its unit")
	}
}

// The poll a claim is made for is recorded with it, whether the unit was
// handed to the poll as it was stored or claimed by the poll from the queue,
// and WorkClaimedByPolls finds the units still claimed for polls of a run.
func testWorkClaimedByPolls(f *fixture) {
	f.account("acme")
	f.account("other")
	now := at(time.Minute)
	poll := func(run string, n int64) store.ClaimPoll { return store.ClaimPoll{Run: run, Poll: n} }
	handed := func(id, account, instance string, cp store.ClaimPoll) store.Work {
		return f.enqueueFor(id, account, now, now.Add(time.Hour), &store.ClaimRef{InstanceID: instance, ClaimID: "claim-" + id, ClaimPoll: cp})
	}
	claimed := func(id, account, instance string, cp store.ClaimPoll) store.Work {
		f.t.Helper()
		f.enqueue(id, account, now, now.Add(time.Hour))
		ws, err := f.s.WorkClaim(f.ctx, store.WorkClaimParams{Account: account, InstanceID: instance, Max: 1,
			ClaimIDs: []string{"claim-" + id}, Now: now, Expect: f.expect, ClaimPoll: cp})
		if err != nil || len(ws) != 1 || ws[0].ID != id {
			f.t.Fatalf("WorkClaim of %s: %v, %v", id, ids(ws), err)
		}
		return ws[0]
	}
	handed("w-1", "acme", "i-1", poll("run-a", 3))
	claimed("w-2", "acme", "i-1", poll("run-a", 4))
	handed("w-3", "acme", "i-1", poll("run-a", 5))
	handed("w-4", "acme", "i-1", poll("run-a", 2)) // before the range
	handed("w-5", "acme", "i-1", poll("run-a", 6)) // after it
	handed("w-6", "acme", "i-1", poll("run-b", 4)) // another run
	handed("w-7", "acme", "i-2", poll("run-a", 4)) // another instance
	handed("w-8", "other", "i-1", poll("run-a", 4))
	handed("w-9", "acme", "i-1", poll("", 4)) // a poll that did not say
	done := claimed("w-10", "acme", "i-1", poll("run-a", 4))
	f.complete(done, now.Add(time.Second)) // no longer claimed
	cancelled := handed("w-11", "acme", "i-1", poll("run-a", 5))
	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: cancelled.ID, Reason: "test", Now: now.Add(time.Second)}); err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}

	lost := func(account, instance, run string, from, to int64) []string {
		f.t.Helper()
		ws, err := f.s.WorkClaimedByPolls(f.ctx, store.WorkClaimedByPollsParams{Account: account, InstanceID: instance, Run: run, FromPoll: from, ToPoll: to})
		if err != nil {
			f.t.Fatalf("WorkClaimedByPolls(%s, %s, %s, %d–%d): %v", account, instance, run, from, to, err)
		}
		for _, w := range ws {
			if w.State != store.StateClaimed || w.ClaimID != "claim-"+w.ID || w.InstanceID != instance {
				f.t.Errorf("WorkClaimedByPolls returned %s in state %s, claim %q, instance %q", w.ID, w.State, w.ClaimID, w.InstanceID)
			}
		}
		return ids(ws)
	}
	if got, want := lost("acme", "i-1", "run-a", 3, 5), []string{"w-1", "w-2", "w-3"}; !slices.Equal(got, want) {
		f.t.Errorf("WorkClaimedByPolls(run-a, polls 3–5) = %v, want %v", got, want)
	}
	if got, want := lost("acme", "i-1", "run-a", 2, 2), []string{"w-4"}; !slices.Equal(got, want) {
		f.t.Errorf("WorkClaimedByPolls(run-a, poll 2) = %v, want %v", got, want)
	}
	if got := lost("acme", "i-1", "run-c", 1, 100); len(got) != 0 {
		f.t.Errorf("WorkClaimedByPolls of a run that claimed nothing = %v, want none", got)
	}
	if got := lost("acme", "i-1", "", 0, 100); len(got) != 0 {
		f.t.Errorf("WorkClaimedByPolls of an unnamed run = %v, want none", got)
	}
	// The claims were recorded as usual, and complete as usual.
	w3 := f.get("w-3")
	if w3.State != store.StateClaimed || w3.InstanceID != "i-1" || w3.ClaimID != "claim-w-3" {
		f.t.Errorf("WorkGet(w-3) = %s by %q under %q, want claimed by i-1 under claim-w-3", w3.State, w3.InstanceID, w3.ClaimID)
	}
	if d := f.complete(w3, now.Add(time.Second)); d.State != store.StateSucceeded {
		f.t.Errorf("WorkComplete(w-3): state %s", d.State)
	}
	if got, want := lost("acme", "i-1", "run-a", 3, 5), []string{"w-1", "w-2"}; !slices.Equal(got, want) {
		f.t.Errorf("WorkClaimedByPolls(run-a, polls 3–5) after w-3 completed = %v, want %v", got, want)
	}
}
