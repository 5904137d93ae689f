package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/sqlitetest"
)

// workRows reads the units of the database at path by rowid: id, account,
// state, the length of its sealed command, queued_at, its idempotency key
// and reason, read without an index.
func workRows(t *testing.T, path string) map[int64][]any {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT rowid, id, account, state, length(sealed_command), queued_at, idempotency_key, reason FROM work NOT INDEXED`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64][]any{}
	for rows.Next() {
		var id int64
		v := make([]any, 7)
		ptrs := []any{&id}
		for i := range v {
			ptrs = append(ptrs, &v[i])
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSalvageKeepsTheRowsThatCanBeReadAndEndsTheUnitsLost: with three
// leaf pages of the work table overwritten (units that had failed, units
// claimed, units queued), Rebuild refuses the table, and with Salvage
// makes a whole database holding every other row as it was, and each unit
// of those pages, named by the indexes, kept under its rowid, id, account,
// queue time and idempotency key as ended: timed out (or the state an index
// kept), its command gone, its reason saying what it was last seen as. A
// store opened on it answers a retry with a lost unit's key with that
// unit, and lists it as ended.
func TestSalvageKeepsTheRowsThatCanBeReadAndEndsTheUnitsLost(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	want := dumpTables(t, path)
	before := workRows(t, path)
	// Units queued, claimed and failed; three pages in a row, then two
	// past a page that reads, which the scan in rowid order passes over
	// (its seeks past the damage land beyond it), and which is read by
	// the rowids its indexes list.
	leaves := []int{5, 6, 7, 9, 10, 12, 20}
	onLeaves := 0
	for _, leaf := range leaves {
		onLeaves += leafCells(t, path, "work", leaf)
	}
	sqlitetest.DamagePage(t, path, "work", "leaf", leaves...)

	_, err := Rebuild(ctx, path, filepath.Join(dir, "refused.db"), path, RebuildOptions{})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" {
		t.Fatalf("Rebuild without salvage: %v; want a DamagedTablesError naming work", err)
	}

	dst := filepath.Join(dir, "salvaged.db")
	now := testNow.Add(time.Hour)
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{Salvage: true, Now: now})
	if err != nil {
		t.Fatalf("Rebuild with salvage: %v", err)
	}
	if len(rep.Lost) != 1 || rep.Lost[0].Table != "work" || !rep.Lost[0].Known || rep.Lost[0].Rows == 0 || rep.Lost[0].Kept != rep.Lost[0].Rows {
		t.Fatalf("Rebuild lost %+v; want some rows of work, all known and kept", rep.Lost)
	}
	got := dumpTables(t, dst)
	for name := range want {
		if name != "work" && fmt.Sprint(got[name]) != fmt.Sprint(want[name]) {
			t.Errorf("table %s: salvaged %d rows, want its %d as they were", name, len(got[name]), len(want[name]))
		}
	}
	after := workRows(t, dst)
	if len(after) != len(before) {
		t.Fatalf("the salvaged work table has %d rows, the damaged one had %d", len(after), len(before))
	}
	lost := 0
	seen := map[string]bool{}
	for rowid, b := range before {
		a, ok := after[rowid]
		if !ok {
			t.Errorf("unit %v (rowid %d) is gone", b[0], rowid)
			continue
		}
		if fmt.Sprint(a) == fmt.Sprint(b) {
			continue
		}
		lost++
		// id, account, queued_at and the key are kept; the command is gone.
		if a[0] != b[0] || a[1] != b[1] || a[4] != b[4] || fmt.Sprint(a[5]) != fmt.Sprint(b[5]) || a[3] != int64(0) {
			t.Errorf("unit at rowid %d kept as %v; it was %v", rowid, a, b)
		}
		reason, _ := a[6].(string)
		var wantState, wantSeen string
		switch b[2] {
		case "failed":
			wantState, wantSeen = "failed", "(last seen failed)"
		case "claimed":
			wantState, wantSeen = "timed_out", "(last seen claimed: its script may have run)"
		case "queued":
			wantState, wantSeen = "timed_out", "(last seen queued)"
		default:
			t.Fatalf("unit %v was %v", b[0], b[2])
		}
		seen[b[2].(string)] = true
		if a[2] != wantState || !strings.Contains(reason, "automator repair --salvage ended it") || !strings.HasSuffix(reason, wantSeen) {
			t.Errorf("unit %v, %v before, kept as %v with the reason %q; want %s and a reason ending %q", b[0], b[2], a[2], reason, wantState, wantSeen)
		}
	}
	if lost != rep.Lost[0].Rows || lost != onLeaves || len(seen) != 3 {
		t.Errorf("%d units kept as lost (of states %v); Rebuild said %d, and the damaged pages held %d", lost, seen, rep.Lost[0].Rows, onLeaves)
	}
	if l := rep.Lost[0].String(); !strings.HasPrefix(l, fmt.Sprintf("%d rows of table work (unit w-", lost)) || !strings.Contains(l, "unit w-000063 (account acme, key k-63, failed)") ||
		!strings.HasSuffix(l, fmt.Sprintf("and %d more), %d of them kept as ended", lost-20, lost)) {
		t.Errorf("the report says %q", l)
	}

	r, err := Open(ctx, dst)
	if err != nil {
		t.Fatalf("Open of the salvaged database: %v", err)
	}
	defer r.Close()
	for rowid, b := range before {
		if fmt.Sprint(after[rowid]) == fmt.Sprint(b) {
			continue
		}
		key := b[5].(string)
		w, err := r.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-retry", Account: "acme", KeyID: 1, IdempotencyKey: key,
			SealedCommand: []byte("c"), Now: now, Deadline: now.Add(time.Hour)})
		if !errors.Is(err, store.ErrDuplicate) || w.ID != b[0] || !w.State.Terminal() {
			t.Errorf("a retry with the key %s of the lost unit %v: %+v, %v; want that unit, ended (ErrDuplicate)", key, b[0], w, err)
		}
		break
	}
}

// TestSalvageLosesOnlyTheUnitWhoseOverflowPageIsDamaged: a unit whose
// command is too large for its page keeps the rest on overflow pages;
// with one of them overwritten, the table's pages all read but that row
// does not, and salvage loses that unit alone, kept as ended.
func TestSalvageLosesOnlyTheUnitWhoseOverflowPageIsDamaged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-large", Account: "acme", KeyID: 1, IdempotencyKey: "k-large",
		SealedCommand: []byte(strings.Repeat("L", 20000)), Now: testNow, Deadline: testNow.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := workRows(t, path)
	sqlitetest.DamagePage(t, path, "work", "overflow", 1)

	dst := filepath.Join(dir, "salvaged.db")
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{Salvage: true, Now: testNow})
	if err != nil {
		t.Fatalf("Rebuild with salvage: %v", err)
	}
	if len(rep.Lost) != 1 || rep.Lost[0].Rows != 1 || !strings.HasPrefix(rep.Lost[0].String(), "1 row of table work (unit w-large (account acme, key k-large, queued))") {
		t.Fatalf("Rebuild lost %v; want the large unit alone", rep.Lost)
	}
	after := workRows(t, dst)
	for rowid, b := range before {
		a := after[rowid]
		if b[0] == "w-large" {
			if a[2] != "timed_out" || a[3] != int64(0) || a[5] != "k-large" {
				t.Errorf("the large unit kept as %v", a)
			}
		} else if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("unit at rowid %d salvaged as %v; it was %v", rowid, a, b)
		}
	}
}

// TestSalvageKeepsAUnitWhoseIdIsLostUnderItsKey: with a page of units
// damaged, and every index that holds their ids too, the index of
// idempotency keys still says which account and key each lost unit had:
// each is kept under an id of its own (w_lost_ROWID), queued as of the
// repair, so that a retry with its key gets it, ended, rather than a new
// unit (a queue time of 0 would have made the key long expired).
func TestSalvageKeepsAUnitWhoseIdIsLostUnderItsKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	onLeaf := leafCells(t, path, "work", 5)
	sqlitetest.DamagePage(t, path, "work", "leaf", 5)
	for _, ix := range []string{"sqlite_autoindex_work_1", "work_queued_at_id", "work_account_queued_at_id",
		"work_queued", "work_claimed", "work_open_deadline", "work_unsuccessful", "work_account_unsuccessful"} {
		sqlitetest.DamageFirstPage(t, path, ix)
	}
	dst := filepath.Join(dir, "salvaged.db")
	now := testNow.Add(48 * time.Hour)
	// Rows trusted: no index that confirms the queued units can be read.
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{Salvage: true, TrustRows: true, Now: now})
	if err != nil {
		t.Fatalf("Rebuild with salvage: %v", err)
	}
	if len(rep.Lost) != 1 || rep.Lost[0].Rows != onLeaf || rep.Lost[0].Kept != onLeaf || !strings.Contains(rep.Lost[0].String(), " (its id not known, account acme, key k-") {
		t.Fatalf("Rebuild lost %v; want the %d units of the page, kept under ids of their own", rep.Lost, onLeaf)
	}
	var key string
	for _, w := range workRows(t, dst) {
		if strings.HasPrefix(w[0].(string), "w_lost_") {
			key = w[5].(string)
			break
		}
	}
	r, err := Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := r.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-retry", Account: "acme", KeyID: 1, IdempotencyKey: key,
		IdempotencySince: now.Add(-24 * time.Hour), SealedCommand: []byte("c"), Now: now, Deadline: now.Add(time.Hour)})
	if !errors.Is(err, store.ErrDuplicate) || !strings.HasPrefix(w.ID, "w_lost_") || w.State != store.StateTimedOut || !w.QueuedAt.Equal(now) {
		t.Errorf("a retry with the key %q of a unit whose id was lost: %+v, %v; want that unit, timed out, queued as of the repair (ErrDuplicate)", key, w, err)
	}
}

// TestSalvageKeepsTheAuditLogsSequence: with a leaf of the audit table
// overwritten, salvage keeps every other event, and the place of each
// event lost as an audit.lost event at its number and time, so the next
// event appended takes a number none had.
func TestSalvageKeepsTheAuditLogsSequence(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	var maxSeq int64
	seqAt := map[int64]int64{}
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT seq, at FROM audit`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var seq, at int64
		if err := rows.Scan(&seq, &at); err != nil {
			t.Fatal(err)
		}
		seqAt[seq] = at
		maxSeq = max(maxSeq, seq)
	}
	rows.Close()
	db.Close()
	// The last leaf: the newest events, whose numbers a store would give
	// again if their places were not kept.
	leaves := int(queryInt(t, path, `SELECT COUNT(*) FROM dbstat WHERE name = 'audit' AND pagetype = 'leaf'`))
	sqlitetest.DamagePage(t, path, "audit", "leaf", leaves-1)

	dst := filepath.Join(dir, "salvaged.db")
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{Salvage: true, Now: testNow})
	if err != nil {
		t.Fatalf("Rebuild with salvage: %v", err)
	}
	if len(rep.Lost) != 1 || rep.Lost[0].Table != "audit" || rep.Lost[0].Rows == 0 || rep.Lost[0].Kept != rep.Lost[0].Rows {
		t.Fatalf("Rebuild lost %+v; want events of audit, kept in place", rep.Lost)
	}
	r, err := Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	events, err := r.AuditList(ctx, store.AuditListParams{Kinds: []string{store.AuditLost}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != rep.Lost[0].Rows {
		t.Fatalf("%d audit.lost events; Rebuild lost %d", len(events), rep.Lost[0].Rows)
	}
	for _, e := range events {
		if at, ok := seqAt[e.Seq]; !ok || e.At.UnixNano() != at {
			t.Errorf("audit.lost event %d at %v; the event lost had that number at %d (%v)", e.Seq, e.At, at, ok)
		}
	}
	e, err := r.AuditAppend(ctx, store.AuditEvent{At: testNow, Kind: store.AuditRepair})
	if err != nil || e.Seq <= maxSeq {
		t.Errorf("the next event appended: number %d, %v; want more than %d, the last before the damage", e.Seq, err, maxSeq)
	}
}

// TestSalvageRefusesTablesItCannotMakeUp: the accounts table's one page
// overwritten is refused with salvage too (an account's key is no row a
// salvage could keep), naming it; and a work table damaged together with
// every index that lists all its units is salvaged with its loss said not
// to be known.
func TestSalvageRefusesTablesItCannotMakeUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	sqlitetest.DamageFirstPage(t, path, "accounts")
	_, err := Rebuild(ctx, path, filepath.Join(dir, "refused.db"), path, RebuildOptions{Salvage: true, Now: testNow})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[accounts]" {
		t.Fatalf("salvage of a damaged accounts table: %v; want a DamagedTablesError naming accounts", err)
	}

	path = filepath.Join(dir, "blind.db")
	damagedFixture(t, path)
	units := len(workRows(t, path))
	onLeaf := leafCells(t, path, "work", 5)
	sqlitetest.DamagePage(t, path, "work", "leaf", 5)
	for _, ix := range []string{"sqlite_autoindex_work_1", "work_queued_at_id", "work_account_queued_at_id", "work_account_idempotency_key",
		"work_queued", "work_claimed", "work_open_deadline", "work_unsuccessful", "work_account_unsuccessful"} {
		sqlitetest.DamageFirstPage(t, path, ix)
	}
	dst := filepath.Join(dir, "salvaged.db")
	_, err = Rebuild(ctx, path, dst, path, RebuildOptions{Salvage: true, Now: testNow})
	if !errors.As(err, &dt) || !strings.Contains(err.Error(), "and its indexes work_queued, work_open_deadline and work_claimed, which would confirm them, cannot be read") {
		t.Fatalf("salvage of a work table none of whose indexes can be read: %v; want it refused, as its queued units cannot be confirmed", err)
	}
	// The operator takes the rows as right.
	rep, err := Rebuild(ctx, path, dst+".2", path, RebuildOptions{Salvage: true, TrustRows: true, Now: testNow})
	if err != nil {
		t.Fatalf("salvage of a work table without a readable index of every unit: %v", err)
	}
	dst += ".2"
	// Read past the damaged page in rowid order: every unit on the other
	// pages kept.
	kept := 0
	for _, w := range workRows(t, dst) {
		if w[3] != int64(0) {
			kept++
		}
	}
	if kept != units-onLeaf {
		t.Errorf("salvage kept %d units; want the %d of %d not on the damaged page", kept, units-onLeaf, units)
	}
	if len(rep.Lost) != 1 || rep.Lost[0].Known || !strings.Contains(rep.Lost[0].String(), "how many more no index named is not known") {
		t.Errorf("Rebuild lost %+v (%v); want work's loss said not known", rep.Lost, rep.Lost)
	}
}

// leafCells counts the cells (rows) of the nth leaf page of the b-tree
// name in the database at path (in the order sqlitetest.DamagePage
// counts).
func leafCells(t *testing.T, path, name string, n int) int {
	t.Helper()
	return int(queryInt(t, path, `SELECT ncell FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path LIMIT 1 OFFSET ?`, name, n))
}

// queryInt runs query, whose answer is one number, on the database at
// path, read only.
func queryInt(t *testing.T, path, query string, args ...any) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestSalvageRefusesAPageWrittenWhereAnotherBelongs: a leaf of units
// written over another's place (a misdirected write) reads with two rows
// under each of its rowids; which copy is right the file does not tell,
// so salvage refuses, saying so, rather than fail on the copy's
// constraint with SQLite's words alone.
func TestSalvageRefusesAPageWrittenWhereAnotherBelongs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var from, to int64
	err = db.QueryRow(`SELECT (SELECT pageno FROM dbstat WHERE name = 'work' AND pagetype = 'leaf' ORDER BY path LIMIT 1 OFFSET 4),
		(SELECT pageno FROM dbstat WHERE name = 'work' AND pagetype = 'leaf' ORDER BY path LIMIT 1 OFFSET 6)`).Scan(&from, &to)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[(to-1)*4096:to*4096], b[(from-1)*4096:from*4096])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Rebuild(ctx, path, filepath.Join(dir, "salvaged.db"), path, RebuildOptions{Salvage: true, Now: testNow})
	if !store.IsDamaged(err) || !strings.Contains(err.Error(), "table \"work\" reads with two rows under one rowid") {
		t.Fatalf("salvage of a work table with a page written where another belongs: %v; want it refused as two rows under one rowid", err)
	}
}

// TestSalvageKeepsThePlacesOfEventsNoIndexNamed: with the index of events
// by time damaged too, no index names the events lost. A page in the
// middle lost leaves a gap between the numbers read: each number of it is
// kept as an audit.lost event. The last page lost leaves how many events
// followed unknown: their numbers are kept by one audit.lost event past
// as many as the file could hold, so the next event appended takes a
// number no event had.
func TestSalvageKeepsThePlacesOfEventsNoIndexNamed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	maxSeq := queryInt(t, path, `SELECT MAX(seq) FROM audit`)
	leaves := int(queryInt(t, path, `SELECT COUNT(*) FROM dbstat WHERE name = 'audit' AND pagetype = 'leaf'`))
	if leaves < 3 {
		t.Fatalf("the audit table has %d leaves; want a middle one and a last", leaves)
	}
	inner := leafCells(t, path, "audit", 1)
	sqlitetest.DamagePage(t, path, "audit", "leaf", 1, leaves-1)
	sqlitetest.DamageFirstPage(t, path, "audit_at")

	dst := filepath.Join(dir, "salvaged.db")
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{Salvage: true, Now: testNow})
	if err != nil {
		t.Fatalf("Rebuild with salvage: %v", err)
	}
	if len(rep.Lost) != 1 || rep.Lost[0].Table != "audit" || rep.Lost[0].Known || rep.Lost[0].Rows != inner ||
		!strings.Contains(rep.Lost[0].String(), " kept in place as audit.lost events; and the events after ") {
		t.Fatalf("Rebuild lost %v; want the %d events of the middle page kept in place, and the numbers after the last read kept", rep.Lost, inner)
	}
	r, err := Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	events, err := r.AuditList(ctx, store.AuditListParams{Kinds: []string{store.AuditLost}, Limit: 10000})
	if err != nil || len(events) != inner+1 {
		t.Fatalf("%d audit.lost events, %v; want %d", len(events), err, inner+1)
	}
	if last := events[len(events)-1]; last.Seq <= maxSeq || !strings.Contains(last.Detail, "could not be read, and how many there were is not known: their numbers, up to this one, are kept for them") {
		t.Errorf("the last audit.lost event: %d, %q; want one past %d keeping the numbers after the last event read", last.Seq, last.Detail, maxSeq)
	}
	e, err := r.AuditAppend(ctx, store.AuditEvent{At: testNow, Kind: store.AuditRepair})
	if err != nil || e.Seq <= maxSeq {
		t.Errorf("the next event appended: number %d, %v; want more than %d, the last before the damage", e.Seq, err, maxSeq)
	}
}
