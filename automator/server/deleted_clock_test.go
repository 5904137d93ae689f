package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestADeletionStampedByASlowerClockStillKillsItsRunningScripts:
// `automator account delete` stamps the deletion with its own host's clock
// (cli/delete.go), and the automator looks for deletions stamped in the
// last deletionLookBack of its own clock (deleted.go). Run with --db from
// a host whose clock is 11 minutes behind the automator's (or after the
// automator's clock stepped forward as much), the deletion is seen all the
// same: the poll of an instance running one of the account's units is told
// to kill it, as when the clocks agree
// (TestAccountDeletionTellsItsWaitingPollsWhatToKill). With the look back
// of 10 minutes it had, it was never seen.
func TestADeletionStampedByASlowerClockStillKillsItsRunningScripts(t *testing.T) {
	t.Parallel()
	e, _, claim, polled := pollWaitingWithARunningUnit(t)

	// As `automator account delete --db` on a host 11 minutes behind.
	if _, err := cachedCredentials(e.store).AccountDelete(context.Background(), store.AccountDeleteParams{
		Name: e.account, Reason: "account deleted", Now: time.Now().Add(-11 * time.Minute),
	}); err != nil {
		t.Fatal(err)
	}

	select {
	case r := <-polled:
		if r.err != nil || len(r.resp.GetCancelled()) != 1 {
			t.Errorf("the poll of an instance running %s when its account was deleted: %v, %v; want it answered with that unit cancelled", claim.GetWorkId(), r.resp, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("5 s after its account's deletion (stamped 11 minutes behind the automator's clock), the poll of the instance running %s was not told: the automator never saw the deletion; the script runs on to its deadline", claim.GetWorkId())
	}
}
