package sqlitestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestDeletedAccountsSealedKeysLeaveTheDatabaseFiles: once an account is
// deleted and the store closed (its WAL checkpointed into the database),
// neither its current nor its previous sealed key is anywhere in the
// database's files, not even in the free space of a page: they are
// overwritten before their rows are deleted. (Crypto-shredding needs the
// sealed keys gone; a copy taken before keeps them, docs/security.md.) So
// do those of an account whose units are moved after its deletion, in
// batches (more than one batch of them).
func TestDeletedAccountsSealedKeysLeaveTheDatabaseFiles(t *testing.T) {
	t.Parallel()
	for _, units := range []int{1, moveBatch + 1} {
		t.Run(fmt.Sprintf("%d units", units), func(t *testing.T) { testDeletedAccountsSealedKeysLeave(t, units) })
	}
}

func testDeletedAccountsSealedKeysLeave(t *testing.T, units int) {
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	current, previous := bytes.Repeat([]byte("CURRENT-SEALED-KEY-"), 4), bytes.Repeat([]byte("PREVIOUS-SEALED-KEY-"), 4)
	other := bytes.Repeat([]byte("OTHER-ACCOUNTS-KEY-"), 4)
	for _, a := range []struct {
		name string
		key  []byte
	}{{"acme", previous}, {"globex", other}} {
		if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: a.name, TokenHash: []byte("token of " + a.name), KeyID: 1, SealedKey: a.key, Now: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AccountRotate(t.Context(), store.AccountRotateParams{Name: "acme", KeyID: 2, SealedKey: current, PreviousUntil: testNow.Add(time.Hour), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	endedUnits(t, s, "acme", units)
	if _, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Now: testNow.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	all := databaseFiles(t, dir)
	for what, key := range map[string][]byte{"current": current, "previous": previous} {
		if bytes.Contains(all, key) {
			t.Errorf("the deleted account's %s sealed key is still in the database files", what)
		}
	}
	if !bytes.Contains(all, other) {
		t.Error("another account's sealed key is not in the database files: the search finds nothing")
	}
}

// endedUnits gives account n ended units (cancelled ones) and returns
// their ids, oldest first.
func endedUnits(t *testing.T, s *Store, account string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%04d", account, i)
		at := testNow.Add(time.Duration(i) * time.Millisecond)
		if _, err := s.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: id, Account: account, KeyID: 1,
			SealedCommand: []byte("sealed command"), Now: at, Deadline: at.Add(5 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WorkCancel(t.Context(), store.WorkCancelParams{ID: id, Reason: "done with", Now: at}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func createAccounts(t *testing.T, s *Store, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: name, TokenHash: []byte("token of " + name), KeyID: 1, SealedKey: []byte("key of " + name), Now: testNow}); err != nil {
			t.Fatal(err)
		}
	}
}

// listIDs lists the units p selects, all on one page, oldest first (as
// endedUnits returns them), and checks that each is listed under the
// account p names, if any.
func listIDs(t *testing.T, s *Store, p store.WorkListParams) []string {
	t.Helper()
	p.Limit = 10000
	ws, err := s.WorkList(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range slices.Backward(ws) {
		if p.Account != "" && w.Account != p.Account {
			t.Errorf("listing %q: unit %s listed under %q", p.Account, w.ID, w.Account)
		}
		ids = append(ids, w.ID)
	}
	return ids
}

// TestALongHistoryIsMovedToItsTombstoneInBatchesBetweenOtherWrites: the
// ended units of a deleted account with more than a batch of them move to
// its tombstone in batches of their own, after the deletion committed,
// and other writes commit between two batches; meanwhile everything reads
// as if they had all moved: the account is gone, its name taken until the
// last batch (ErrBeingDeleted), and every unit shows its tombstone.
func TestALongHistoryIsMovedToItsTombstoneInBatchesBetweenOtherWrites(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	createAccounts(t, s, "acme", "globex")
	ids := endedUnits(t, s, "acme", 2*moveBatch+50)
	at := testNow.Add(time.Hour)
	tomb := store.DeletedAccountName("acme", at)
	batches := 0
	s.movedBatch = func() {
		batches++
		if batches > 1 {
			return
		}
		// Another account's write commits while units are left to move.
		id := fmt.Sprintf("globex-%d", batches)
		if _, err := s.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: id, Account: "globex", KeyID: 1, Now: at, Deadline: at.Add(time.Minute)}); err != nil {
			t.Errorf("another account's unit, between two batches: %v", err)
		}
		var left int
		if err := s.read.QueryRowContext(t.Context(), `SELECT count(*) FROM work WHERE account = 'acme'`).Scan(&left); err != nil || left == 0 {
			t.Fatalf("units of acme left to move: %d, %v; want some (the test would show nothing)", left, err)
		}
		if _, err := s.AccountGet(t.Context(), "acme"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("AccountGet of the account being deleted: %v, want ErrNotFound", err)
		}
		if _, err := s.AccountGetByTokenHash(t.Context(), []byte("token of acme")); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("AccountGetByTokenHash of its token: %v, want ErrNotFound", err)
		}
		if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: at}); !errors.Is(err, store.ErrBeingDeleted) {
			t.Errorf("AccountCreate of its name: %v, want ErrBeingDeleted", err)
		}
		if _, err := s.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: "acme-new", Account: "acme", KeyID: 1, Now: at, Deadline: at.Add(time.Minute)}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("WorkEnqueue for it: %v, want ErrNotFound", err)
		}
		for _, id := range ids {
			if w, err := s.WorkGet(t.Context(), id); err != nil || w.Account != tomb {
				t.Fatalf("WorkGet(%s) while units move: account %q, %v; want %q", id, w.Account, err, tomb)
			}
		}
		if got := listIDs(t, s, store.WorkListParams{Account: tomb}); !slices.Equal(got, ids) {
			t.Errorf("listing the tombstone while units move: %d units, want all %d", len(got), len(ids))
		}
		if got := listIDs(t, s, store.WorkListParams{Account: tomb, State: store.StateCancelled, WithoutSealed: true}); !slices.Equal(got, ids) {
			t.Errorf("listing the tombstone's cancelled units while units move: %d units, want all %d", len(got), len(ids))
		}
		if got := listIDs(t, s, store.WorkListParams{Account: "acme"}); len(got) != 0 {
			t.Errorf("listing acme while its units move: %d units, want none", len(got))
		}
		all, err := s.WorkList(t.Context(), store.WorkListParams{Limit: 10000, WithoutSealed: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range all {
			if strings.HasPrefix(w.ID, "acme-") && w.Account != tomb {
				t.Fatalf("listing every account while units move: unit %s under %q, want %q", w.ID, w.Account, tomb)
			}
		}
	}
	var told []int
	d, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: at,
		Moving: func(d store.AccountDeletion, left int) {
			if d.Tombstone != tomb || batches > 0 {
				t.Errorf("Moving called with tombstone %q after %d batches; want %q before the first", d.Tombstone, batches, tomb)
			}
			told = append(told, left)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(told, []int{len(ids)}) {
		t.Errorf("Moving was told of %v units left, want once %d", told, len(ids))
	}
	if d.Units != len(ids) || d.Tombstone != tomb || d.Resumed {
		t.Errorf("AccountDelete = %d units under %q, resumed %v; want %d under %q", d.Units, d.Tombstone, d.Resumed, len(ids), tomb)
	}
	if want := len(ids)/moveBatch + 1; batches != want {
		t.Errorf("the units moved in %d batches after the deletion, want %d", batches, want)
	}
	if got := listIDs(t, s, store.WorkListParams{Account: tomb}); !slices.Equal(got, ids) {
		t.Errorf("listing the tombstone: %d units, want all %d", len(got), len(ids))
	}
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: at}); err != nil {
		t.Errorf("AccountCreate of the name once every unit moved: %v", err)
	}
	if got := listIDs(t, s, store.WorkListParams{Account: "acme"}); len(got) != 0 {
		t.Errorf("the new account acme lists %d units of the old one", len(got))
	}
}

// interruptedDeletion deletes acme, which has more than a batch of ended
// units, and stops the deletion after its first batch.
func interruptedDeletion(t *testing.T, s *Store, at time.Time) (store.AccountDeletion, []string) {
	t.Helper()
	createAccounts(t, s, "acme")
	ids := endedUnits(t, s, "acme", 2*moveBatch+50)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s.movedBatch = cancel
	d, err := s.AccountDelete(ctx, store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: at, AuditDeletion: deletionEvent})
	s.movedBatch = nil
	if !errors.Is(err, store.ErrDeletionUnfinished) || !errors.Is(err, context.Canceled) {
		t.Fatalf("AccountDelete stopped after its first batch: %v, want ErrDeletionUnfinished and context.Canceled", err)
	}
	if d.Tombstone != store.DeletedAccountName("acme", at) || d.Units != len(ids) {
		t.Fatalf("AccountDelete stopped after its first batch: %d units under %q, want the deletion (%d units)", d.Units, d.Tombstone, len(ids))
	}
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: at}); !errors.Is(err, store.ErrBeingDeleted) {
		t.Fatalf("AccountCreate of its name: %v, want ErrBeingDeleted", err)
	}
	// Its event is in the deletion's transaction, with every unit counted.
	wantDeletionEvents(t, s, fmt.Sprintf("%d units under %s", len(ids), d.Tombstone))
	return d, ids
}

// deletionEvent is an AccountDeleteParams.AuditDeletion.
func deletionEvent(d store.AccountDeletion) []store.AuditEvent {
	return []store.AuditEvent{{At: d.DeletedAt, Kind: store.AuditAccountDeleted, Account: d.Name, Detail: fmt.Sprintf("%d units under %s", d.Units, d.Tombstone)}}
}

// wantDeletionEvents reports unless the audit log holds the events of
// deletionEvent with these details.
func wantDeletionEvents(t *testing.T, s *Store, details ...string) {
	t.Helper()
	es, err := s.AuditList(t.Context(), store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Detail)
	}
	if !slices.Equal(got, details) {
		t.Errorf("audit log = %q, want %q", got, details)
	}
}

// TestAnUnfinishedDeletionIsFinishedByDeletingAgain: a deletion stopped
// before it moved every unit (its context ended) stands; deleting the
// account again moves the rest and frees the name, and a third time the
// account is not found.
func TestAnUnfinishedDeletionIsFinishedByDeletingAgain(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	at := testNow.Add(time.Hour)
	first, ids := interruptedDeletion(t, s, at)
	d, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Reason: "deleted again", Now: at.Add(time.Minute), AuditDeletion: deletionEvent})
	if err != nil {
		t.Fatal(err)
	}
	// Audited when it was made, not again.
	wantDeletionEvents(t, s, fmt.Sprintf("%d units under %s", len(ids), first.Tombstone))
	if !d.Resumed || d.Tombstone != first.Tombstone || !d.DeletedAt.Equal(first.DeletedAt) || d.Units != len(ids)-moveBatch {
		t.Errorf("deleting again = resumed %v, %d units under %q deleted at %v; want resumed, %d under %q at %v",
			d.Resumed, d.Units, d.Tombstone, d.DeletedAt, len(ids)-moveBatch, first.Tombstone, first.DeletedAt)
	}
	if got := listIDs(t, s, store.WorkListParams{Account: first.Tombstone}); !slices.Equal(got, ids) {
		t.Errorf("listing the tombstone: %d units, want all %d", len(got), len(ids))
	}
	if _, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Now: at.Add(2 * time.Minute)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting a third time: %v, want ErrNotFound", err)
	}
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: at}); err != nil {
		t.Errorf("AccountCreate of the name once the deletion is finished: %v", err)
	}
}

// TestAccountsBeingDeletedListsAnUnfinishedDeletionWithTheUnitsLeft: an
// account whose deletion stopped is listed, with its tombstone and the
// units left to move, until a resumed deletion has moved them; Resume
// finishes it, and is ErrNotFound for an account not being deleted.
func TestAccountsBeingDeletedListsAnUnfinishedDeletionWithTheUnitsLeft(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	at := testNow.Add(time.Hour)
	first, ids := interruptedDeletion(t, s, at)
	createAccounts(t, s, "globex")
	ds, err := s.AccountsBeingDeleted(t.Context())
	if want := (store.AccountDeletion{Name: "acme", Tombstone: first.Tombstone, DeletedAt: first.DeletedAt, Units: len(ids) - moveBatch}); err != nil || len(ds) != 1 ||
		ds[0].Name != want.Name || ds[0].Tombstone != want.Tombstone || !ds[0].DeletedAt.Equal(want.DeletedAt) || ds[0].Units != want.Units {
		t.Fatalf("AccountsBeingDeleted = %+v, %v; want only %+v", ds, err, want)
	}
	if _, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "globex", Resume: true, Now: at}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AccountDelete with Resume of an account not being deleted: %v, want ErrNotFound", err)
	}
	if _, err := s.AccountGet(t.Context(), "globex"); err != nil {
		t.Errorf("the account AccountDelete with Resume was refused: %v, want it kept", err)
	}
	d, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Resume: true, Now: at})
	if err != nil || !d.Resumed || d.Units != len(ids)-moveBatch {
		t.Errorf("AccountDelete with Resume of acme = resumed %v, %d units, %v; want the %d units left", d.Resumed, d.Units, err, len(ids)-moveBatch)
	}
	if ds, err := s.AccountsBeingDeleted(t.Context()); err != nil || len(ds) != 0 {
		t.Errorf("AccountsBeingDeleted once finished = %+v, %v; want none", ds, err)
	}
}

// TestTwoMoversOfOneDeletionMoveEachUnitOnce: the units of one unfinished
// deletion moved by two stores at once (the serving automator and
// `account delete` run again, each its own process) all end under the
// tombstone, each moved by one of them, and the name is free. A mover
// that finds the deletion finished by the other between two of its
// batches stops: the name may be a new account's by then, whose units
// stay its own.
func TestTwoMoversOfOneDeletionMoveEachUnitOnce(t *testing.T) {
	t.Parallel()
	t.Run("interleaved, the name taken again meanwhile", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "automator.db")
		a := open(t, path)
		at := testNow.Add(time.Hour)
		first, ids := interruptedDeletion(t, a, at)
		b := open(t, path)
		var other store.AccountDeletion
		a.movedBatch = func() {
			a.movedBatch = nil
			var err error
			if other, err = b.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Now: at}); err != nil {
				t.Fatalf("the other mover: %v", err)
			}
			createAccounts(t, b, "acme")
			for _, id := range []string{"new-queued", "new-ended"} {
				if _, err := b.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, Now: at, Deadline: at.Add(time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := b.WorkCancel(t.Context(), store.WorkCancelParams{ID: "new-ended", Reason: "done with", Now: at}); err != nil {
				t.Fatal(err)
			}
		}
		d, err := a.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Resume: true, Now: at})
		if err != nil || d.Units != moveBatch || other.Units != len(ids)-2*moveBatch {
			t.Errorf("the movers moved %d (%v) and %d units; want %d and the other %d", d.Units, err, other.Units, moveBatch, len(ids)-2*moveBatch)
		}
		if got := listIDs(t, a, store.WorkListParams{Account: first.Tombstone}); !slices.Equal(got, ids) {
			t.Errorf("listing the tombstone: %v, want the %d units of the deleted account", got, len(ids))
		}
		for _, id := range []string{"new-queued", "new-ended"} {
			if w, err := a.WorkGet(t.Context(), id); err != nil || w.Account != "acme" {
				t.Errorf("unit %s of the new account acme: under %q, %v; want it kept acme's", id, w.Account, err)
			}
		}
	})
	t.Run("at once", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "automator.db")
		a := open(t, path)
		at := testNow.Add(time.Hour)
		first, ids := interruptedDeletion(t, a, at)
		b := open(t, path)
		type result struct {
			d   store.AccountDeletion
			err error
		}
		results := make(chan result, 2)
		for _, s := range []*Store{a, b} {
			go func() {
				d, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Resume: true, Now: at})
				results <- result{d, err}
			}()
		}
		moved := 0
		for range 2 {
			r := <-results
			if r.err != nil && !errors.Is(r.err, store.ErrNotFound) {
				t.Errorf("a mover: %v", r.err)
			}
			moved += r.d.Units
		}
		if moved != len(ids)-moveBatch {
			t.Errorf("the movers moved %d units between them, want the %d left", moved, len(ids)-moveBatch)
		}
		if got := listIDs(t, a, store.WorkListParams{Account: first.Tombstone}); !slices.Equal(got, ids) {
			t.Errorf("listing the tombstone: %d units, want all %d", len(got), len(ids))
		}
		var left int
		if err := a.read.QueryRowContext(t.Context(), `SELECT count(*) FROM work WHERE account = 'acme'`).Scan(&left); err != nil || left != 0 {
			t.Errorf("units left under acme: %d, %v; want none", left, err)
		}
		if _, err := a.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: at}); err != nil {
			t.Errorf("AccountCreate of the name once both movers returned: %v", err)
		}
	})
}

// TestThePurgeFreesTheNameOfAnUnfinishedDeletion: once the purge deleted
// the units an unfinished deletion left to move, the name is free, and the
// tombstone goes when its own units have.
func TestThePurgeFreesTheNameOfAnUnfinishedDeletion(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	at := testNow.Add(time.Hour)
	interruptedDeletion(t, s, at)
	if n, err := s.WorkPurge(t.Context(), store.WorkPurgeParams{QueuedBefore: at.Add(time.Hour), Max: 10000}); err != nil || n != 2*moveBatch+50 {
		t.Fatalf("WorkPurge = %d, %v; want every unit", n, err)
	}
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: at}); err != nil {
		t.Errorf("AccountCreate of the name once the purge deleted its units: %v", err)
	}
	if ds, err := s.AccountDeletions(t.Context(), time.Time{}); err != nil || len(ds) != 0 {
		t.Errorf("AccountDeletions after the purge = %v, %v; want none (the tombstone purged)", ds, err)
	}
}

// databaseFiles returns the bytes of every file in dir, the database's
// directory, one after another: what a search for a secret must not find.
func databaseFiles(t *testing.T, dir string) []byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	return all
}
