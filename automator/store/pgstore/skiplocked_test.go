package pgstore

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestAClaimDoesNotWaitForAUnitAnotherSessionHolds: a claimer that meets a
// queued unit another session holds locked (another replica's claim of it
// under way) takes the next one at once rather than waiting for the lock
// (FOR UPDATE SKIP LOCKED): claimers of one account never queue behind each
// other. The race tests of two replicas catch a claim that waits only some
// of the time; this one holds the lock for as long as it takes.
func TestAClaimDoesNotWaitForAUnitAnotherSessionHolds(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	ctx := t.Context()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	// Same queued_at: the claim's order is then by id, so "a-held" is the
	// oldest and the one a claim of one unit would take.
	for _, id := range []string{"a-held", "b-free"} {
		if _, err := s.WorkEnqueue(ctx, enqueueParams(id, "acme")); err != nil {
			t.Fatal(err)
		}
	}
	release := pgtest.LockWorkRow(t, dsn, "a-held")

	type claim struct {
		ws  []store.Work
		err error
	}
	done := make(chan claim, 1)
	go func() {
		ws, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i1", Max: 1, ClaimIDs: []string{"c1"}, Now: testNow})
		done <- claim{ws, err}
	}()
	var got claim
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		release() // let the waiting claim end, so the test does
		<-done
		t.Fatal("the claim waited for the unit another session holds; want it to take the next unit at once")
	}
	if got.err != nil {
		t.Fatalf("claiming: %v", got.err)
	}
	if len(got.ws) != 1 || got.ws[0].ID != "b-free" {
		t.Fatalf("the claim took %v; want [b-free], the held unit skipped", workIDs(got.ws))
	}
}

func workIDs(ws []store.Work) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}
