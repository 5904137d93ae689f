package cli

import (
	"errors"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestRestoreKeepsIdempotencyKeysUsedAfterTheBackup: a unit queued with an
// idempotency key after the backup was taken, and run, is not in the
// backup. After the restore, the caller's retry with that key ("repeat the
// execute with the same idempotency key ... neither runs the script
// again", docs/api.md) must not queue the command again: at most once
// across a restore (docs/backup.md).
func TestRestoreKeepsIdempotencyKeysUsedAfterTheBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	enqueue := func(st *sqlitestore.Store, id, key string, now time.Time) (store.Work, error) {
		return st.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("deploy"),
			Now: now, Deadline: now.Add(time.Hour), IdempotencyKey: key, IdempotencySince: now.Add(-24 * time.Hour)})
	}
	// After the backup: a unit is queued with its key, claimed and run;
	// another is queued with its key and claimed, and may be running.
	withStore(t, dir, func(st *sqlitestore.Store) {
		now := time.Now()
		if _, err := enqueue(st, "w-after", "deploy-1", now); err != nil {
			t.Fatal(err)
		}
		if _, err := enqueue(st, "w-running", "deploy-2", now.Add(time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		ws, err := st.WorkClaim(t.Context(), store.WorkClaimParams{Account: "acme", InstanceID: "host-a", Max: 5, ClaimIDs: claimIDsFor(5), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.ID == "w-after" {
				if _, err := st.WorkComplete(t.Context(), store.WorkCompleteParams{ID: w.ID, ClaimID: w.ClaimID, State: store.StateSucceeded, Now: now}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, file); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		for _, c := range []struct {
			key, first string
			state      store.State
		}{{"deploy-1", "w-after", store.StateSucceeded}, {"deploy-2", "w-running", store.StateTimedOut}} {
			w, err := enqueue(st, "w-retry-"+c.key, c.key, time.Now())
			if !errors.Is(err, store.ErrDuplicate) || w.ID != c.first || w.State != c.state {
				t.Errorf("a retry with the key %s of a unit queued after the backup: unit %s (%s), %v; want %v with %s, %s, nothing queued again",
					c.key, w.ID, w.State, err, store.ErrDuplicate, c.first, c.state)
			}
		}
		if ws, err := st.WorkClaim(t.Context(), store.WorkClaimParams{Account: "acme", InstanceID: "host-b", Max: 5, ClaimIDs: claimIDsFor(5), Now: time.Now()}); err != nil || len(ws) != 0 {
			t.Errorf("a claim after the restore got %d units, %v; want none", len(ws), err)
		}
	})
}
