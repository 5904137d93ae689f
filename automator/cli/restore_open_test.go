package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestRestoreEndsEveryOpenUnitOfTheBackupHoweverMany: a restore ends the
// open units of the backup a batch at a time; with more of them than one
// batch, it ends them all, so that none is claimed and run a second time
// (at most once, DESIGN.md).
func TestRestoreEndsEveryOpenUnitOfTheBackupHoweverMany(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir) // one claimed unit, one queued
	const more = 1000     // with the fixture's, more than one batch
	withStore(t, dir, func(st *sqlitestore.Store) {
		now := time.Now()
		for i := range more {
			if _, err := st.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: fmt.Sprintf("w-open-%04d", i), Account: "acme", KeyID: 1,
				SealedCommand: []byte("c"), Now: now, Deadline: now.Add(time.Hour), SyncLater: true}); err != nil {
				t.Fatal(err)
			}
		}
	})
	file := takeBackup(t, dir)
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if want := fmt.Sprintf("ended %d units open in the backup as timed_out (%d queued, 1 claimed)", more+2, more+1); !strings.Contains(stdout, want) {
		t.Errorf("restore printed:\n%s\nwant %q", stdout, want)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		for _, state := range []store.State{store.StateQueued, store.StateClaimed} {
			if ws, err := st.WorkList(t.Context(), store.WorkListParams{State: state, Limit: 10}); err != nil || len(ws) != 0 {
				t.Errorf("after the restore, %d units are %s (%v), want none", len(ws), state, err)
			}
		}
	})
}
