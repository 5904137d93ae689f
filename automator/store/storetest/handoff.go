package storetest

import (
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// A unit handed straight to a waiting poll is stored already claimed.
var handoffCases = []testCase{
	{"WorkEnqueueClaimedStoresTheClaim", testWorkEnqueueClaimed},
	{"WorkEnqueueClaimedWithTakenIDOrUsedKeyChangesNothing", testWorkEnqueueClaimedRefused},
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
