package cli

import (
	"bytes"
	"errors"
	"slices"
	"strings"
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

// TestRestoreRecordsTheUnitsItCopiesFromTheReplacedDatabase: a unit queued
// with an idempotency key after the backup was taken is copied into the
// restored database with its audit records, and one still open there is
// ended as the backup's open units are: its reason names its claimer, and
// its work.ended record (detail "restore") is written with its end. No unit
// is in the database, nor ends, without its record (docs/security.md).
func TestRestoreRecordsTheUnitsItCopiesFromTheReplacedDatabase(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	// After the backup: "w-after" is queued with its key, claimed and run;
	// "w-running" is queued with its key and claimed, and may be running.
	withStore(t, dir, func(st *sqlitestore.Store) {
		ctx := t.Context()
		now := time.Now()
		for i, id := range []string{"w-after", "w-running"} {
			queued := now.Add(time.Duration(i) * time.Millisecond) // claimed oldest first
			if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("deploy"),
				Now: queued, Deadline: now.Add(time.Hour), IdempotencyKey: "key-" + id, IdempotencySince: now.Add(-24 * time.Hour),
				Audit: &store.AuditEvent{At: queued, Kind: store.AuditWorkQueued, Account: "acme", WorkID: id, Actor: "apikey:admin"}}); err != nil {
				t.Fatal(err)
			}
		}
		ws, err := st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "host-a", Max: 5, ClaimIDs: claimIDsFor(5), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.ID == "w-after" {
				if _, err := st.WorkComplete(ctx, store.WorkCompleteParams{ID: w.ID, ClaimID: w.ClaimID, State: store.StateSucceeded, Now: now,
					Audit: &store.AuditEvent{At: now, Kind: store.AuditWorkEnded, Actor: "account:acme"}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"ended 2 units open in the backup as timed_out (1 queued, 1 claimed)",
		"copied 2 units queued with an idempotency key after the backup was taken from the replaced database (1 of them open, ended as timed_out)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("restore printed:\n%s\nwant %q", stdout, want)
		}
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		ctx := t.Context()
		w, err := st.WorkGet(ctx, "w-running")
		if want := carriedReason + " (claimed by instance host-a at "; err != nil || w.State != store.StateTimedOut || !strings.HasPrefix(w.Reason, want) {
			t.Errorf("w-running after the restore: %s (%q), %v; want timed_out, its reason starting %q", w.State, w.Reason, err, want)
		}
		if w, err := st.WorkGet(ctx, "w-after"); err != nil || w.State != store.StateSucceeded {
			t.Errorf("w-after after the restore: %s, %v; want succeeded, as it was", w.State, err)
		}
		got := unitsAudit(t, st, "w-after", "w-running")
		want := map[string][]string{
			"w-after":   {"work.queued  ", "work.ended succeeded "},
			"w-running": {"work.queued  ", "work.ended timed_out restore"},
		}
		for id, kinds := range want {
			if strings.Join(got[id], "; ") != strings.Join(kinds, "; ") {
				t.Errorf("audit records of %s after the restore: %q; want %q", id, got[id], kinds)
			}
		}
	})
}

// TestRestoreCopiesOnlyTheRecordsOfTheUnitsItCopies: the audit records
// copied from the replaced database are those of the units it copies
// (queued with an idempotency key after the backup was taken). A unit the
// backup holds too keeps the records the backup holds of it, each once: the
// replaced database's copies of them are not added.
func TestRestoreCopiesOnlyTheRecordsOfTheUnitsItCopies(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	ctx := t.Context()
	now := time.Now()
	enqueue := func(st *sqlitestore.Store, id string, at time.Time) {
		t.Helper()
		if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("deploy"),
			Now: at, Deadline: at.Add(time.Hour), IdempotencyKey: "key-" + id, IdempotencySince: at.Add(-24 * time.Hour),
			Audit: &store.AuditEvent{At: at, Kind: store.AuditWorkQueued, Account: "acme", WorkID: id, Actor: "apikey:admin"}}); err != nil {
			t.Fatal(err)
		}
	}
	// "w-before" is queued with its key before the backup is taken, so
	// both the backup and the database it replaces hold it and its record;
	// "w-after" after, so only the replaced database does.
	withStore(t, dir, func(st *sqlitestore.Store) { enqueue(st, "w-before", now) })
	file := takeBackup(t, dir)
	withStore(t, dir, func(st *sqlitestore.Store) { enqueue(st, "w-after", now.Add(time.Millisecond)) })
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, file); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		got := unitsAudit(t, st, "w-before", "w-after")
		// Both were open: the restore ended them, each with its record.
		for _, id := range []string{"w-before", "w-after"} {
			want := []string{"work.queued  ", "work.ended timed_out restore"}
			if strings.Join(got[id], "; ") != strings.Join(want, "; ") {
				t.Errorf("audit records of %s after the restore: %q; want %q", id, got[id], want)
			}
		}
	})
}

// TestRestoreKeepsTheKeysOfTheWholeIdempotencyWindow: a key stays bound to
// its unit for 24 hours; a unit queued with a key after the backup was
// taken, 23 hours before the restore, is copied from the replaced
// database like one queued a moment before it, and a retry with its key
// gets it. One queued 25 hours before, whose key no longer binds, is not
// copied.
func TestRestoreKeepsTheKeysOfTheWholeIdempotencyWindow(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	now := time.Now()
	enqueue := func(st *sqlitestore.Store, id, key string, at time.Time) (store.Work, error) {
		return st.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("deploy"),
			Now: at, Deadline: at.Add(48 * time.Hour), IdempotencyKey: key, IdempotencySince: at.Add(-24 * time.Hour)})
	}
	// Queued after the backup was taken, with the times of units queued a
	// day or so ago (a backup kept since, restored now).
	withStore(t, dir, func(st *sqlitestore.Store) {
		for id, at := range map[string]time.Time{"w-23h": now.Add(-23 * time.Hour), "w-25h": now.Add(-25 * time.Hour)} {
			if _, err := enqueue(st, id, "key-"+id, at); err != nil {
				t.Fatal(err)
			}
		}
	})
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, file); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		if w, err := enqueue(st, "w-retry", "key-w-23h", time.Now()); !errors.Is(err, store.ErrDuplicate) || w.ID != "w-23h" {
			t.Errorf("a retry with the key of a unit queued 23 hours ago, after the backup: unit %s, %v; want %v with w-23h, nothing queued again", w.ID, err, store.ErrDuplicate)
		}
		if _, err := st.WorkGet(t.Context(), "w-25h"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the unit queued 25 hours ago, its key no longer bound: %v, want it not copied (%v)", err, store.ErrNotFound)
		}
	})
}

// unitsAudit returns the audit records of the units ids in st, each as
// "KIND OUTCOME DETAIL", in the order AuditList gives them.
func unitsAudit(t *testing.T, st *sqlitestore.Store, ids ...string) map[string][]string {
	t.Helper()
	events, err := st.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, e := range events {
		if slices.Contains(ids, e.WorkID) {
			got[e.WorkID] = append(got[e.WorkID], e.Kind+" "+e.Outcome+" "+e.Detail)
		}
	}
	return got
}

// TestRestoreCopiesTheKeyOfAUnitQueuedAfterARotation: a unit queued with an
// idempotency key after the backup, under a key that a rotate-key made
// after the backup too, is copied into the restored database; its key used
// to be left behind, so the unit (the caller's retry with its key, a Get,
// `work show`) could never be opened, and the next rotate-key would make
// another key under the same id. The key comes along as a previous key,
// usable by no proxy; the next rotate-key makes the id after it.
func TestRestoreCopiesTheKeyOfAUnitQueuedAfterARotation(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	if code, _, stderr := runCLI(t, "account", "rotate-key", "acme", "--overlap", "0", "--data-dir", dir); code != 0 {
		t.Fatalf("rotate-key: exit %d: %s", code, stderr)
	}
	var key2 []byte
	withStore(t, dir, func(st *sqlitestore.Store) {
		keys, err := st.AccountKeys(t.Context(), "acme")
		if err != nil || len(keys) == 0 || keys[0].KeyID != 2 {
			t.Fatalf("acme's keys after rotate-key: %v, %v; want key 2 current", keys, err)
		}
		key2 = keys[0].SealedKey
		now := time.Now()
		if _, err := st.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: "w-key2", Account: "acme", KeyID: 2, SealedCommand: []byte("deploy"),
			Now: now, Deadline: now.Add(time.Hour), IdempotencyKey: "deploy-key2", IdempotencySince: now.Add(-24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	})
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, file); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	keyOf := func(st *sqlitestore.Store, id uint32) (store.AccountKey, bool) {
		keys, err := st.AccountKeys(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(keys, func(k store.AccountKey) bool { return k.KeyID == id })
		if i < 0 {
			return store.AccountKey{}, false
		}
		return keys[i], true
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		if w, err := st.WorkGet(t.Context(), "w-key2"); err != nil || w.KeyID != 2 {
			t.Fatalf("the unit queued under key 2 after the backup: %+v, %v; want it copied", w, err)
		}
		k, ok := keyOf(st, 2)
		switch {
		case !ok:
			t.Fatal("after the restore acme has no key 2, which the unit it copied is sealed with")
		case k.Current || !bytes.Equal(k.SealedKey, key2) || k.UsableUntil.After(time.Now()):
			t.Errorf("acme's key 2 after the restore: current %v, the replaced database's %v, usable until %v; want the replaced database's key 2, a previous key no proxy may use",
				k.Current, bytes.Equal(k.SealedKey, key2), k.UsableUntil)
		}
	})
	if code, _, stderr := runCLI(t, "account", "rotate-key", "acme", "--overlap", "0", "--data-dir", dir); code != 0 {
		t.Fatalf("rotate-key after the restore: exit %d: %s", code, stderr)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		if keys, err := st.AccountKeys(t.Context(), "acme"); err != nil || keys[0].KeyID != 3 {
			t.Errorf("acme's current key after a rotate-key following the restore: %v, %v; want key 3", keys, err)
		}
		if k, ok := keyOf(st, 2); !ok || !bytes.Equal(k.SealedKey, key2) {
			t.Error("the unit's key 2 was replaced by the rotate-key after the restore")
		}
	})
}

// TestRestoreSaysWhichKeylessUnitsItLoses: units queued after the backup
// was taken without an idempotency key, open in the replaced database, are
// in no backup and not copied: the restore counts them, the claimed ones
// apart (their scripts may still be running), and says that a caller who
// runs its command again may run it twice. Before, it said nothing of them
// (a review). A keyed one is copied, and not counted; an ended one is not.
func TestRestoreSaysWhichKeylessUnitsItLoses(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	withStore(t, dir, func(st *sqlitestore.Store) {
		ctx := t.Context()
		now := time.Now()
		enqueue := func(i int, id, key string) {
			queued := now.Add(time.Duration(i) * time.Millisecond)
			p := store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("deploy"), Now: queued, Deadline: now.Add(time.Hour)}
			if key != "" {
				p.IdempotencyKey, p.IdempotencySince = key, now.Add(-24*time.Hour)
			}
			if _, err := st.WorkEnqueue(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		enqueue(0, "w-lost-claimed", "")
		// Claimed with the backup's queued units (older, in the backup).
		if _, err := st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "host-a", Max: 10, ClaimIDs: claimIDsFor(10), Now: now}); err != nil {
			t.Fatal(err)
		}
		if w, err := st.WorkGet(ctx, "w-lost-claimed"); err != nil || w.State != store.StateClaimed {
			t.Fatalf("w-lost-claimed: %v, %v; want claimed", w.State, err)
		}
		enqueue(1, "w-lost-queued", "")
		enqueue(2, "w-keyed", "key-w-keyed")
	})
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if want := "warning: lost with the replaced database, not in the backup: 2 units queued after the backup was taken without an idempotency key, open (1 queued, 1 claimed: a claimed one's script may still be running)"; !strings.Contains(stdout, want) || !strings.Contains(stdout, "may run it twice") {
		t.Errorf("restore printed:\n%s\nwant %q", stdout, want)
	}
}
