package server_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/waittest"
)

// movingHook is a store whose AccountDelete calls moving once it has
// committed and starts moving units in batches (AccountDeleteParams.Moving).
type movingHook struct {
	store.Store
	moving func()
}

func (s movingHook) AccountDelete(ctx context.Context, p store.AccountDeleteParams) (store.AccountDeletion, error) {
	told := p.Moving
	p.Moving = func(d store.AccountDeletion, left int) {
		if told != nil {
			told(d, left)
		}
		s.moving()
	}
	return s.Store.AccountDelete(ctx, p)
}

// unfinishedDeletion gives the env's account units ended units and deletes
// it, stopping the deletion before any of them moved under its tombstone
// (SQLite moves more than a batch after the deletion commits), as an
// `account delete` stopped by Ctrl+C leaves it. It returns the deletion.
func (e *env) unfinishedDeletion(units int) store.AccountDeletion {
	e.t.Helper()
	db, err := sql.Open("sqlite", "file:"+e.dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, finished_at)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
SELECT 'w' || i, ?, 'succeeded', 1, randomblob(64), i, i + 1000, i + 1 FROM n`, units, e.account); err != nil {
		e.t.Fatal(err)
	}
	stop, cancel := context.WithCancel(e.t.Context())
	defer cancel()
	d, err := e.store.AccountDelete(stop, store.AccountDeleteParams{Name: e.account, Now: time.Now(),
		Moving: func(store.AccountDeletion, int) { cancel() }})
	if !errors.Is(err, store.ErrDeletionUnfinished) {
		e.t.Fatalf("AccountDelete stopped before its first batch: %v, want ErrDeletionUnfinished", err)
	}
	return d
}

// checkFinished checks that the deletion d of the env's account, of units
// units, is finished: every unit under its tombstone, none left under the
// name, which is free.
func (e *env) checkFinished(d store.AccountDeletion, units int) {
	e.t.Helper()
	ctx := e.t.Context()
	if ds, err := e.store.AccountsBeingDeleted(ctx); err != nil || len(ds) != 0 {
		e.t.Errorf("AccountsBeingDeleted = %+v, %v; want none", ds, err)
	}
	if ws, err := e.store.WorkList(ctx, store.WorkListParams{Account: d.Tombstone, Limit: 2 * units, WithoutSealed: true}); err != nil || len(ws) != units {
		e.t.Errorf("units under the tombstone: %d, %v; want all %d", len(ws), err, units)
	}
	if _, err := e.store.AccountCreate(ctx, store.AccountCreateParams{Name: e.account, TokenHash: []byte("new token"), KeyID: 1, SealedKey: []byte("new key"), Now: time.Now()}); err != nil {
		e.t.Errorf("AccountCreate of the name: %v, want it free", err)
	}
	if ws, err := e.store.WorkList(ctx, store.WorkListParams{Account: e.account, Limit: 10}); err != nil || len(ws) != 0 {
		e.t.Errorf("units of the new account %s: %d, %v; want none of the old one's", e.account, len(ws), err)
	}
}

// TestTheAutomatorFinishesAnUnfinishedDeletionAndShutdownStopsIt: an
// account deletion left unfinished is finished by the automator
// (FinishDeletions, which serve runs as it starts and every hour), without
// any command, and the name is then free. Shutdown stops it between two
// batches, the rest left for the next automator; each logs a line as it
// starts and one as it ends.
func TestTheAutomatorFinishesAnUnfinishedDeletionAndShutdownStopsIt(t *testing.T) {
	log := &syncLog{}
	var srv *server.Server
	e := newEnv(t, envOptions{log: log, wrap: func(st store.Store) store.Store {
		return movingHook{Store: st, moving: func() { srv.Shutdown() }}
	}})
	srv = e.srv
	const units = 350
	d := e.unfinishedDeletion(units)

	srv.FinishDeletions(t.Context())
	if got := log.lines("finishing an account deletion left unfinished", "account=acme", "units_left=350"); len(got) != 1 {
		t.Errorf("log lines of the deletion being finished, naming acme and its 350 units: %q; want one", got)
	}
	if got := log.lines("stopped finishing an account deletion left unfinished", "account=acme"); len(got) != 1 {
		t.Errorf("log lines of the automator stopping as it shuts down: %q; want one", got)
	}
	ds, err := e.store.AccountsBeingDeleted(t.Context())
	if err != nil || len(ds) != 1 || ds[0].Units < units-100 {
		t.Fatalf("AccountsBeingDeleted after the shut down automator stopped = %+v, %v; want acme with at least %d units left (one batch at most moved)", ds, err, units-100)
	}

	next, err := server.New(server.Options{Store: e.store, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	next.FinishDeletions(t.Context())
	if got := log.lines("finished an account deletion left unfinished: its name is free", "account=acme", "units_moved="); len(got) != 1 {
		t.Errorf("log lines of the deletion finished: %q; want one", got)
	}
	e.checkFinished(d, units)
}

// TestTheAutomatorAndACommandFinishOneDeletionAtOnce: the automator
// finishing a deletion while `account delete` run again moves the same
// account's units (another process: here another store on the same file)
// is no harm: both return, every unit is under the tombstone, none is
// left, and the name is free.
func TestTheAutomatorAndACommandFinishOneDeletionAtOnce(t *testing.T) {
	log := &syncLog{}
	serverMoving := make(chan struct{})
	e := newEnv(t, envOptions{log: log, wrap: func(st store.Store) store.Store {
		return movingHook{Store: st, moving: func() { close(serverMoving) }}
	}})
	const units = 1000
	d := e.unfinishedDeletion(units)

	cmd, err := sqlitestore.Open(t.Context(), e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Close()
	type result struct {
		d   store.AccountDeletion
		err error
	}
	cmdDone := make(chan result, 1)
	go func() {
		// Both count the units left before either moves one.
		d, err := cmd.AccountDelete(t.Context(), store.AccountDeleteParams{Name: e.account, Now: time.Now(),
			Moving: func(store.AccountDeletion, int) { <-serverMoving }})
		cmdDone <- result{d, err}
	}()
	e.srv.FinishDeletions(t.Context())
	r := waittest.Recv(t, cmdDone, "the command to finish moving")
	if r.err != nil || !r.d.Resumed {
		t.Errorf("the command: resumed %v, %v; want it to finish the deletion", r.d.Resumed, r.err)
	}
	got := log.lines("finished an account deletion left unfinished: its name is free", "account=acme")
	if len(got) != 1 {
		t.Fatalf("log lines of the deletion finished by the automator: %q; want one", got)
	}
	m := regexp.MustCompile(`units_moved=(\d+)`).FindStringSubmatch(got[0])
	if m == nil {
		t.Fatalf("the automator's line %q does not count the units it moved", got[0])
	}
	moved, _ := strconv.Atoi(m[1])
	t.Logf("the automator moved %d units, the command %d", moved, r.d.Units)
	if moved+r.d.Units != units {
		t.Errorf("the automator moved %d units and the command %d; want %d between them", moved, r.d.Units, units)
	}
	e.checkFinished(d, units)
}

// TestTheAutomatorAuditsTheDeletionItFinishes: an account deletion the
// automator finishes (FinishDeletions) has an account.deletion_finished
// audit record of its own, by the automator, naming the account, its
// tombstone and the units it moved; the deletion itself was audited when
// it was made, and is not again.
func TestTheAutomatorAuditsTheDeletionItFinishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	const units = 250
	d := e.unfinishedDeletion(units)
	before, err := e.store.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}

	e.srv.FinishDeletions(t.Context())
	after, err := e.store.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	added := after[len(before):]
	want := store.DeletionFinishedEvent(store.AccountDeletion{Name: e.account, Tombstone: d.Tombstone, Units: units}, time.Time{}, "automator", "")
	if len(added) != 1 || added[0].Kind != store.AuditAccountDeletionFinished || added[0].Actor != "automator" ||
		added[0].Account != e.account || added[0].Detail != want.Detail {
		t.Errorf("audit events of the automator finishing the deletion: %+v; want one %s by the automator, %q", added, store.AuditAccountDeletionFinished, want.Detail)
	}
	e.checkFinished(d, units)
}

// TestThePurgeThatEndsAnUnfinishedDeletionIsAudited: a purge (PurgeEnded)
// that deletes every unit an unfinished deletion had left to move ends
// that deletion, and records it as the automator's
// account.deletion_finished.
func TestThePurgeThatEndsAnUnfinishedDeletionIsAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	d := e.unfinishedDeletion(150)
	before, err := e.store.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// The units were queued in 1970.
	if n, err := e.srv.PurgeEnded(t.Context(), time.Hour); err != nil || n != 150 {
		t.Fatalf("PurgeEnded = %d, %v; want the 150 units", n, err)
	}
	after, err := e.store.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	added := after[len(before):]
	want := store.DeletionPurgedEvent(d, time.Time{}, "automator", "")
	if len(added) != 1 || added[0].Kind != store.AuditAccountDeletionFinished || added[0].Actor != "automator" ||
		added[0].Account != e.account || added[0].Detail != want.Detail {
		t.Errorf("audit events of the purge ending the deletion: %+v; want one %s by the automator, %q", added, store.AuditAccountDeletionFinished, want.Detail)
	}
	if ds, err := e.store.AccountsBeingDeleted(t.Context()); err != nil || len(ds) != 0 {
		t.Errorf("AccountsBeingDeleted after the purge = %+v, %v; want none", ds, err)
	}
}
