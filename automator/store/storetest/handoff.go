package storetest

import (
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// A unit handed straight to a waiting poll is stored already claimed; one
// whose poll left before it could be delivered is queued again.
var handoffCases = []testCase{
	{"WorkEnqueueClaimedStoresTheClaim", testWorkEnqueueClaimed},
	{"WorkEnqueueClaimedWithTakenIDOrUsedKeyChangesNothing", testWorkEnqueueClaimedRefused},
	{"WorkUnclaimQueuesTheUnitsAgain", testWorkUnclaimQueuesAgain},
	{"WorkUnclaimLeavesOtherClaimsAlone", testWorkUnclaimLeavesOthersAlone},
}

// enqueueClaimed stores a unit of account claimed by instance under claimID.
func (f *fixture) enqueueClaimed(id, account, instance, claimID string, now time.Time) store.Work {
	f.t.Helper()
	w, err := f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{
		ID:            id,
		Account:       account,
		KeyID:         7,
		SealedCommand: []byte("sealed command of " + id),
		Now:           now,
		Deadline:      now.Add(time.Hour),
		ClaimFor:      &store.ClaimRef{InstanceID: instance, ClaimID: claimID},
	})
	if err != nil {
		f.t.Fatalf("WorkEnqueue(%q) claimed by %q: %v", id, instance, err)
	}
	return w
}

func (f *fixture) unclaim(claims ...store.ClaimRef) []store.Work {
	f.t.Helper()
	ws, err := f.s.WorkUnclaim(f.ctx, claims)
	if err != nil {
		f.t.Fatalf("WorkUnclaim: %v", err)
	}
	return ws
}

func refOf(w store.Work) store.ClaimRef {
	return store.ClaimRef{ID: w.ID, InstanceID: w.InstanceID, ClaimID: w.ClaimID}
}

func testWorkEnqueueClaimed(f *fixture) {
	f.account("acme")
	now := at(time.Minute)
	got := f.enqueueClaimed("w-1", "acme", "i-1", "claim-1", now)
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

func testWorkUnclaimQueuesAgain(f *fixture) {
	f.account("acme")
	f.enqueue("w-1", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "w-1", at(time.Second))
	handed := f.enqueueClaimed("w-2", "acme", "i-2", "claim-2", at(2*time.Second))

	back := f.unclaim(refOf(claimed), refOf(handed))
	slices.SortFunc(back, func(a, b store.Work) int { return a.QueuedAt.Compare(b.QueuedAt) })
	if got := ids(back); !slices.Equal(got, []string{"w-1", "w-2"}) {
		f.t.Fatalf("WorkUnclaim queued %v again, want [w-1 w-2]", got)
	}
	for _, w := range back {
		if w.State != store.StateQueued || w.InstanceID != "" || w.ClaimID != "" || !w.ClaimedAt.IsZero() {
			f.t.Errorf("WorkUnclaim returned %s as %s by %q under %q at %v, want queued with no claim", w.ID, w.State, w.InstanceID, w.ClaimID, w.ClaimedAt)
		}
		f.wantWork("WorkGet of "+w.ID+" queued again", f.get(w.ID), w)
	}
	// Claimable again, oldest first, and the old claims are void.
	again := f.claim("acme", "i-3", 10, at(3*time.Second))
	if got := ids(again); !slices.Equal(got, []string{"w-1", "w-2"}) {
		f.t.Fatalf("WorkClaim after WorkUnclaim took %v, want [w-1 w-2]", got)
	}
	_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
		ID: "w-2", ClaimID: "claim-2", State: store.StateSucceeded, Now: at(4 * time.Second),
	})
	f.wantErr("WorkComplete under a claim that was undone", err, store.ErrClaimMismatch)
}

func testWorkUnclaimLeavesOthersAlone(f *fixture) {
	f.account("acme")
	f.enqueue("done", "acme", at(0), at(time.Hour))
	done := f.complete(f.claimOne("acme", "i-1", "done", at(time.Second)), at(2*time.Second))
	f.enqueue("held", "acme", at(3*time.Second), at(time.Hour))
	held := f.claimOne("acme", "i-1", "held", at(4*time.Second))
	queued := f.enqueue("queued", "acme", at(5*time.Second), at(time.Hour))

	back := f.unclaim(
		store.ClaimRef{ID: "held", InstanceID: "i-1", ClaimID: "another claim"},
		store.ClaimRef{ID: "held", InstanceID: "i-2", ClaimID: held.ClaimID},
		refOf(done),
		refOf(queued),
		store.ClaimRef{ID: "nowhere", InstanceID: "i-1", ClaimID: "x"},
	)
	if len(back) != 0 {
		f.t.Errorf("WorkUnclaim of claims that do not hold queued %v again", ids(back))
	}
	f.wantWork("WorkGet of the held unit", f.get("held"), held)
	f.wantWork("WorkGet of the finished unit", f.get("done"), done)
	f.wantWork("WorkGet of the queued unit", f.get("queued"), queued)
	if back := f.unclaim(); len(back) != 0 {
		f.t.Errorf("WorkUnclaim of nothing queued %v", ids(back))
	}
}
