package storetest

import (
	"context"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var endedCases = []testCase{
	{"AWriteWhoseContextHasEndedChangesNothing", testAWriteWhoseContextHasEnded},
}

// testAWriteWhoseContextHasEnded: a write whose caller's context is done
// before the write is made returns the context's error and changes
// nothing, whichever way the backend runs it (alone, in a batch, in a
// transaction). Once under way, a write runs to its end whatever becomes of
// the context (its caller gets the committed outcome): only a backend's
// own tests can hold a write under way.
func testAWriteWhoseContextHasEnded(f *fixture) {
	f.account("acme")
	f.enqueue("claimed", "acme", at(0), at(time.Hour))
	claimed := f.claimOne("acme", "i-1", "claimed", at(time.Second))
	f.enqueue("queued", "acme", at(time.Microsecond), at(time.Hour))
	f.enqueue("due", "acme", at(2*time.Microsecond), at(time.Minute))
	f.enqueue("to-cancel", "acme", at(3*time.Microsecond), at(time.Hour))

	ended, cancel := context.WithCancel(f.ctx)
	cancel()
	later := at(2 * time.Minute)
	for _, c := range []struct {
		what  string
		write func() error
	}{
		{"WorkEnqueue", func() error {
			_, err := f.s.WorkEnqueue(ended, store.WorkEnqueueParams{ID: "new", Account: "acme", KeyID: 7, SealedCommand: []byte("c"), Now: later, Deadline: at(time.Hour)})
			return err
		}},
		{"WorkEnqueue with an idempotency key", func() error {
			_, err := f.s.WorkEnqueue(ended, store.WorkEnqueueParams{ID: "new-keyed", Account: "acme", KeyID: 7, SealedCommand: []byte("c"), Now: later, Deadline: at(time.Hour),
				IdempotencyKey: "key"})
			return err
		}},
		{"WorkClaim", func() error {
			_, err := f.s.WorkClaim(ended, store.WorkClaimParams{Account: "acme", InstanceID: "i-2", Max: 5, ClaimIDs: claimIDs("c", 5), Now: at(2 * time.Second)})
			return err
		}},
		{"WorkClaim expecting a unit", func() error {
			_, err := f.s.WorkClaim(ended, store.WorkClaimParams{Account: "acme", InstanceID: "i-2", Max: 5, ClaimIDs: claimIDs("c", 5), Now: at(2 * time.Second), Expect: true})
			return err
		}},
		{"WorkComplete", func() error {
			_, err := f.s.WorkComplete(ended, store.WorkCompleteParams{ID: claimed.ID, ClaimID: claimed.ClaimID, State: store.StateSucceeded, Now: at(2 * time.Second)})
			return err
		}},
		{"WorkCancel", func() error {
			_, err := f.s.WorkCancel(ended, store.WorkCancelParams{ID: "to-cancel", Reason: "r", Now: at(2 * time.Second)})
			return err
		}},
		{"WorkExpire", func() error {
			_, err := f.s.WorkExpire(ended, store.WorkExpireParams{Now: later})
			return err
		}},
		{"AccountRotate", func() error {
			_, err := f.s.AccountRotate(ended, store.AccountRotateParams{Name: "acme", TokenHash: hash("new token"), Now: later})
			return err
		}},
		{"InstancesSeen", func() error {
			return f.s.InstancesSeen(ended, []store.InstanceSeenParams{{Account: "acme", InstanceID: "i-3", Hostname: "h", Version: "v", Now: later}})
		}},
	} {
		f.wantErr(c.what+" with a context done already", c.write(), context.Canceled)
	}

	for id, want := range map[string]store.State{
		"claimed": store.StateClaimed, "queued": store.StateQueued, "due": store.StateQueued, "to-cancel": store.StateQueued,
	} {
		f.wantState(id, want)
	}
	for _, id := range []string{"new", "new-keyed"} {
		if f.exists(id) {
			f.t.Errorf("unit %s was stored", id)
		}
	}
	if _, err := f.byToken(hash("new token"), later); err == nil {
		f.t.Error("the rotated token authenticates: the rotation was written")
	}
	f.wantInstances("acme", nil)
}
