package sqlitestore

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// finishedEvent is an AccountDeleteParams.AuditFinished, of actor who.
func finishedEvent(who string) func(d store.AccountDeletion) []store.AuditEvent {
	return func(d store.AccountDeletion) []store.AuditEvent {
		return []store.AuditEvent{{At: d.DeletedAt, Kind: store.AuditAccountDeletionFinished, Actor: who, Account: d.Name,
			Detail: fmt.Sprintf("%d units moved under %s", d.Units, d.Tombstone)}}
	}
}

// wantAudit reports unless the audit log holds exactly these events, as
// "KIND ACTOR: DETAIL".
func wantAudit(t *testing.T, s *Store, want ...string) {
	t.Helper()
	es, err := s.AuditList(t.Context(), store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, fmt.Sprintf("%s %s: %s", e.Kind, e.Actor, e.Detail))
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit log = %q, want %q", got, want)
	}
}

// TestFinishingAnUnfinishedDeletionIsAuditedWithTheLastBatch: a resumed
// deletion appends its AuditFinished events in the transaction that moves
// the last units and frees the name, with the units it moved; one whose
// events cannot be written leaves the name taken and the last batch
// unmoved, and appends nothing, until a resumed deletion whose events can
// be written finishes it.
func TestFinishingAnUnfinishedDeletionIsAuditedWithTheLastBatch(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	at := testNow.Add(time.Hour)
	first, ids := interruptedDeletion(t, s, at)
	deleted := fmt.Sprintf("account.deleted : %d units under %s", len(ids), first.Tombstone)

	bad := func(store.AccountDeletion) []store.AuditEvent { return []store.AuditEvent{{Detail: "no kind"}} }
	_, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Resume: true, Now: at, AuditFinished: bad})
	if !errors.Is(err, store.ErrDeletionUnfinished) {
		t.Errorf("AccountDelete with Resume whose finishing event fails: %v, want ErrDeletionUnfinished", err)
	}
	wantAudit(t, s, deleted)
	ds, err := s.AccountsBeingDeleted(t.Context())
	if left := len(ids) - 2*moveBatch; err != nil || len(ds) != 1 || ds[0].Units != left {
		t.Errorf("AccountsBeingDeleted after the finishing event failed = %+v, %v; want acme with its last %d units", ds, err, left)
	}
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: at}); !errors.Is(err, store.ErrBeingDeleted) {
		t.Errorf("AccountCreate of the name after the finishing event failed: %v, want ErrBeingDeleted", err)
	}

	d, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Resume: true, Now: at, AuditFinished: finishedEvent("automator")})
	if err != nil || d.Units != len(ids)-2*moveBatch {
		t.Fatalf("AccountDelete with Resume = %d units moved, %v; want the last %d", d.Units, err, len(ids)-2*moveBatch)
	}
	wantAudit(t, s, deleted, fmt.Sprintf("account.deletion_finished automator: %d units moved under %s", d.Units, first.Tombstone))
	if got := listIDs(t, s, store.WorkListParams{Account: first.Tombstone}); !slices.Equal(got, ids) {
		t.Errorf("listing the tombstone: %d units, want all %d", len(got), len(ids))
	}
}

// TestOnlyTheMoverThatFreesTheNameAuditsTheFinish: of two calls finishing
// one deletion (the serving automator and `account delete` run again),
// the one whose transaction frees the name appends its AuditFinished
// events, with the units it moved; the other, which finds the deletion
// finished between two of its batches, appends none.
func TestOnlyTheMoverThatFreesTheNameAuditsTheFinish(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "automator.db")
	a := open(t, path)
	at := testNow.Add(time.Hour)
	first, ids := interruptedDeletion(t, a, at)
	b := open(t, path)
	var other store.AccountDeletion
	a.movedBatch = func() {
		a.movedBatch = nil
		var err error
		if other, err = b.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Now: at, AuditFinished: finishedEvent("cli:op")}); err != nil {
			t.Fatalf("the other mover: %v", err)
		}
	}
	d, err := a.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Resume: true, Now: at, AuditFinished: finishedEvent("automator")})
	if err != nil || d.Units != moveBatch || other.Units != len(ids)-2*moveBatch {
		t.Fatalf("the movers moved %d (%v) and %d units; want %d and the other %d", d.Units, err, other.Units, moveBatch, len(ids)-2*moveBatch)
	}
	wantAudit(t, a, fmt.Sprintf("account.deleted : %d units under %s", len(ids), first.Tombstone),
		fmt.Sprintf("account.deletion_finished cli:op: %d units moved under %s", other.Units, first.Tombstone))
}

// TestThePurgeThatEndsAnUnfinishedDeletionAuditsIt: a purge that deleted
// every unit an unfinished deletion had left to move, and so frees its
// name, appends its AuditFinished events for it in its transaction.
func TestThePurgeThatEndsAnUnfinishedDeletionAuditsIt(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	at := testNow.Add(time.Hour)
	first, ids := interruptedDeletion(t, s, at)
	purge := func(audit func(store.AccountDeletion) []store.AuditEvent) error {
		_, err := s.WorkPurge(t.Context(), store.WorkPurgeParams{QueuedBefore: at.Add(time.Hour), Max: 10000, AuditFinished: audit})
		return err
	}
	if err := purge(func(store.AccountDeletion) []store.AuditEvent { return []store.AuditEvent{{Detail: "no kind"}} }); err == nil {
		t.Errorf("WorkPurge whose finishing event fails succeeded")
	}
	if ds, err := s.AccountsBeingDeleted(t.Context()); err != nil || len(ds) != 1 {
		t.Errorf("AccountsBeingDeleted after a purge whose finishing event failed = %+v, %v; want acme still", ds, err)
	}
	if err := purge(func(d store.AccountDeletion) []store.AuditEvent {
		return []store.AuditEvent{{At: d.DeletedAt, Kind: store.AuditAccountDeletionFinished, Actor: "automator", Account: d.Name,
			Detail: fmt.Sprintf("units left purged, %s, deleted at %s", d.Tombstone, d.DeletedAt.UTC().Format(time.RFC3339Nano))}}
	}); err != nil {
		t.Fatal(err)
	}
	wantAudit(t, s, fmt.Sprintf("account.deleted : %d units under %s", len(ids), first.Tombstone),
		fmt.Sprintf("account.deletion_finished automator: units left purged, %s, deleted at %s", first.Tombstone, first.DeletedAt.UTC().Format(time.RFC3339Nano)))
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: at}); err != nil {
		t.Errorf("AccountCreate of the name once the purge deleted its units: %v", err)
	}
}

// TestADeletionThatMovesItsOwnUnitsAppendsNoFinishedEvent: a deletion that
// moves its units in batches and frees the name itself is audited by its
// AuditDeletion events only: AuditFinished is for one left unfinished.
func TestADeletionThatMovesItsOwnUnitsAppendsNoFinishedEvent(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	createAccounts(t, s, "acme")
	ids := endedUnits(t, s, "acme", 2*moveBatch+50)
	at := testNow.Add(time.Hour)
	d, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: at,
		AuditDeletion: deletionEvent, AuditFinished: finishedEvent("automator")})
	if err != nil || d.Resumed {
		t.Fatalf("AccountDelete = resumed %v, %v; want the deletion made", d.Resumed, err)
	}
	wantAudit(t, s, fmt.Sprintf("account.deleted : %d units under %s", len(ids), d.Tombstone))
}
