package sqlitestore

import (
	"context"
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

// damagedFixture makes an automator database at path holding units in
// every state (400 of them, so that the work table and its indexes span
// pages of more than one level), their audit records, and closes it: its
// write-ahead log checkpointed into the file. Every seventh unit is then
// deleted, so that the rowids have gaps a copy must keep.
func damagedFixture(t *testing.T, path string) {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("t"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: fmt.Sprintf("w-%06d", i), Account: "acme", KeyID: 1,
			IdempotencyKey: fmt.Sprintf("k-%d", i), SealedCommand: []byte(strings.Repeat("c", 200)), Now: testNow, Deadline: testNow.Add(time.Hour),
			Audit: &store.AuditEvent{At: testNow, Kind: store.AuditWorkQueued, Actor: "test"}}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-1", Max: 200, ClaimIDs: claimIDs(200), Now: testNow})
	if err != nil || len(claimed) != 200 {
		t.Fatalf("WorkClaim: %d units, %v", len(claimed), err)
	}
	for _, w := range claimed[:100] {
		if _, err := s.WorkComplete(ctx, store.WorkCompleteParams{ID: w.ID, ClaimID: w.ClaimID, State: store.StateFailed, SealedResult: []byte("r"), Now: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+uriPath(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM work WHERE rowid % 7 = 0`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func claimIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("c-%d", i)
	}
	return ids
}

// dumpTables reads every row of every table of the database at path,
// rowids included, in rowid order, without going through an index.
func dumpTables(t *testing.T, path string) map[string][]string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	names, err := tableNames(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, name := range names {
		sel := "SELECT rowid, * FROM " + quoteIdent(name) + " NOT INDEXED ORDER BY rowid"
		if strings.HasPrefix(name, "sqlite_") {
			sel = "SELECT * FROM " + quoteIdent(name)
		}
		rows, err := db.Query(sel)
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out[name] = append(out[name], fmt.Sprint(vals...))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		rows.Close()
	}
	return out
}

// TestRebuildOfADatabaseWhoseIndexesAreDamagedLosesNothing: with pages of
// two of work's indexes overwritten, the store's calls that use them fail
// as damaged (store.IsDamaged); Rebuild makes a database SQLite finds
// whole, holding every row of every table as it was (rowids too), with
// every index, and a store opened on it claims the queued units.
func TestRebuildOfADatabaseWhoseIndexesAreDamagedLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	want := dumpTables(t, path)
	var queued int
	if db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro"); err != nil {
		t.Fatal(err)
	} else {
		err := db.QueryRow(`SELECT COUNT(*) FROM work WHERE state = 'queued'`).Scan(&queued)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, idx := range []string{"work_queued", "work_account_idempotency_key"} {
		sqlitetest.DamageFirstPage(t, path, idx)
	}

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open of the damaged database: %v", err)
	}
	_, err = s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-1", Max: 1, ClaimIDs: []string{"c-x"}, Now: testNow})
	if !store.IsDamaged(err) {
		t.Errorf("WorkClaim on a damaged index: %v; want an error store.IsDamaged reports", err)
	}
	s.Close()

	dst := filepath.Join(dir, "rebuilt.db")
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{})
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the rebuilt database: %v, %v; want mode 0600, as the database it replaces", fi.Mode(), err)
	}
	if rep.Found == 0 || len(rep.Problems) == 0 {
		t.Errorf("Rebuild reported %d problems (%q); want those integrity_check found", rep.Found, rep.Problems)
	}
	if got := dumpTables(t, dst); fmt.Sprint(got) != fmt.Sprint(want) {
		for name := range want {
			if len(got[name]) != len(want[name]) {
				t.Errorf("table %s: %d rows rebuilt, want %d", name, len(got[name]), len(want[name]))
			}
		}
		t.Fatalf("the rebuilt database's rows differ from the damaged one's before the damage")
	}
	var indexes int
	db, err := sql.Open("sqlite", "file:"+uriPath(dst)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check of the rebuilt database: %q, %v", check, err)
	}
	db.Close()
	if indexes == 0 || rep.Indexes != indexes {
		t.Errorf("Rebuild built %d indexes; the rebuilt database has %d", rep.Indexes, indexes)
	}

	r, err := Open(ctx, dst)
	if err != nil {
		t.Fatalf("Open of the rebuilt database: %v", err)
	}
	defer r.Close()
	claimed, err := r.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-2", Max: 300, ClaimIDs: claimIDs(300), Now: testNow})
	if err != nil || len(claimed) != queued || queued == 0 {
		t.Fatalf("WorkClaim on the rebuilt database: %d units, %v; want the %d still queued", len(claimed), err, queued)
	}
	// The idempotency keys are there: a submit with one returns its unit.
	if _, err := r.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-new", Account: "acme", KeyID: 1, IdempotencyKey: "k-7",
		SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour)}); !errors.Is(err, store.ErrDuplicate) {
		t.Errorf("WorkEnqueue with a key used before the rebuild: %v; want ErrDuplicate", err)
	}
}

// TestRebuildRefusesADatabaseWhoseRowsAreDamaged: with a page of the work
// table itself overwritten, Rebuild makes no database: it names the
// table, and its error is a damaged database's. The damaged file is left
// as it was.
func TestRebuildRefusesADatabaseWhoseRowsAreDamaged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	sqlitetest.DamageFirstPage(t, path, "work")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Rebuild(ctx, path, filepath.Join(dir, "rebuilt.db"), "DB", RebuildOptions{})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" || !store.IsDamaged(err) {
		t.Fatalf("Rebuild of a database whose work table is damaged: %v; want a DamagedTablesError naming work", err)
	}
	if !strings.Contains(err.Error(), "the rows of table work are damaged") {
		t.Errorf("the error says %q", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Error("Rebuild changed the damaged file")
	}
}

// TestRebuildOfAWholeDatabaseSaysSo: a database integrity_check finds
// whole is refused with ErrWhole, and nothing is made, nor left beside it
// (reading a database in WAL mode makes its -wal and -shm files).
func TestRebuildOfAWholeDatabaseSaysSo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	dst := filepath.Join(dir, "rebuilt.db")
	if _, err := Rebuild(context.Background(), path, dst, path, RebuildOptions{}); !errors.Is(err, ErrWhole) {
		t.Fatalf("Rebuild of a whole database: %v; want ErrWhole", err)
	}
	// Nothing made, nothing left beside the database read.
	for _, p := range []string{dst, path + "-wal", path + "-shm"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is there after Rebuild of a whole database (%v)", p, err)
		}
	}
}

// TestRebuildRefusesATableThatLostRowsWithoutAnError: a page of the work
// table whose count of rows was lowered reads with no error, and fewer
// rows; the work table's indexes, read from the damaged file, still list
// them, so Rebuild refuses the table rather than rebuild it without them.
func TestRebuildRefusesATableThatLostRowsWithoutAnError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	// The work table's root is an interior page (400 units); its right-most
	// child, a leaf, has its cell count at bytes 3–4 of its header.
	hdr := readFilePage(t, path, sqlitetest.RootPage(t, path, "work"))
	if hdr[0] != 0x05 {
		t.Fatalf("the work table's root page (type %#x) is not an interior page", hdr[0])
	}
	lowerCellCount(t, path, int64(hdr[8])<<24|int64(hdr[9])<<16|int64(hdr[10])<<8|int64(hdr[11]), 0x0d)

	_, err := Rebuild(ctx, path, filepath.Join(dir, "rebuilt.db"), path, RebuildOptions{})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" || !strings.Contains(err.Error(), "Fragmentation") {
		t.Fatalf("Rebuild of a work table that lost 2 rows without an error: %v; want a DamagedTablesError naming work", err)
	}
}

// TestRebuildOnlyReadsTheDamagedDatabase: Rebuild leaves the damaged
// database and its write-ahead log (a crash's: the process that wrote it
// never closed it) byte for byte as they were, whether it rebuilds or
// refuses: they are what an operator may still need.
func TestRebuildOnlyReadsTheDamagedDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	// Units written while a copy of the files is taken, with the log
	// holding them: as a serve killed with SIGKILL leaves them.
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: fmt.Sprintf("w-late-%d", i), Account: "acme", KeyID: 1,
			SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	crashed := filepath.Join(dir, "crashed.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crashed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	sqlitetest.DamageFirstPage(t, crashed, "work_account_unsuccessful")
	before := map[string][]byte{}
	for _, suffix := range []string{"", "-wal"} {
		before[suffix], _ = os.ReadFile(crashed + suffix)
	}
	if len(before["-wal"]) == 0 {
		t.Fatal("the copy has no write-ahead log")
	}
	dst := filepath.Join(dir, "rebuilt.db")
	if _, err := Rebuild(ctx, crashed, dst, crashed, RebuildOptions{}); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	for _, suffix := range []string{"", "-wal"} {
		if b, _ := os.ReadFile(crashed + suffix); string(b) != string(before[suffix]) {
			t.Errorf("Rebuild changed %s", crashed+suffix)
		}
	}
	// The units in the log are in what was rebuilt.
	r, err := Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if w, err := r.WorkGet(ctx, "w-late-19"); err != nil || w.State != store.StateQueued {
		t.Errorf("a unit the write-ahead log held, after the rebuild: %+v, %v", w, err)
	}
}

// TestRebuildOfIndexesThatReadWrongValuesIsRefusedUnlessTheRowsAreTrusted:
// pages of indexes that read without an error but list a row with another
// value than the table holds (taken from a copy in which the row had that
// value: one of the work table's, another row in another of its indexes,
// and the audit table's one index) cannot be told from the table's pages
// having lost a write, so Rebuild refuses both tables; trusting the rows,
// it rebuilds the indexes, and every row is as it was but the queued unit
// an index listed otherwise, which is ended: with its row in doubt it may
// have been claimed and run, and is not run again.
func TestRebuildOfIndexesThatReadWrongValuesIsRefusedUnlessTheRowsAreTrusted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	want := dumpTables(t, path)
	sqlitetest.ChangedPages(t, path, "work_queued_at_id", `UPDATE work SET queued_at = queued_at + 1 WHERE id = 'w-000123'`)
	sqlitetest.ChangedPages(t, path, "sqlite_autoindex_work_1", `UPDATE work SET id = 'w-x00200' WHERE id = 'w-000200'`)
	sqlitetest.ChangedPages(t, path, "audit_at", `DROP TRIGGER audit_no_update`, `UPDATE audit SET at = at + 1 WHERE rowid = 5`)

	_, err := Rebuild(ctx, path, filepath.Join(dir, "refused.db"), path, RebuildOptions{})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work audit]" || !strings.Contains(err.Error(), "run repair again with --trust-rows") {
		t.Fatalf("Rebuild with indexes listing rows otherwise: %v; want the work and audit tables refused, saying how to trust their rows", err)
	}
	dst := filepath.Join(dir, "rebuilt.db")
	now := testNow.Add(time.Hour)
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{TrustRows: true, Now: now})
	if err != nil {
		t.Fatalf("Rebuild trusting the rows: %v", err)
	}
	if rep.Found < 3 {
		t.Errorf("integrity_check found %d problems (%q); want one at least for each index", rep.Found, rep.Problems)
	}
	if rep.EndedCount != 1 || fmt.Sprint(rep.Ended) != "[w-000200]" {
		t.Errorf("Rebuild ended %d units %v; want the queued unit an index listed otherwise, w-000200", rep.EndedCount, rep.Ended)
	}
	r, err := Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.WorkGet(ctx, "w-000200")
	if err != nil || w.State != store.StateTimedOut || !strings.Contains(w.Reason, "ended rather than risk running it twice") {
		t.Errorf("the queued unit an index listed otherwise: %+v, %v; want it timed out, saying why", w, err)
	}
	r.Close()
	// As it was before the damage, the unit ended aside.
	db, err := sql.Open("sqlite", "file:"+uriPath(dst))
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`UPDATE work SET state = 'queued', finished_at = 0, reason = '' WHERE id = 'w-000200'`)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := dumpTables(t, dst); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Error("the rebuilt database's rows differ from the database's before the damage")
	}
}

// TestRebuildRefusesATablePageThatLostAWrite: a page of the work table that
// lost the write that ended a queued unit (its indexes have it) would
// queue the unit again, and run it twice; a page of the audit table (one
// index) that lost the writes of its latest events would lose them, and
// give their numbers again. Both read without an error, and SQLite's
// integrity_check finds only indexes that disagree; Rebuild refuses both.
// And so a claimed unit read back as queued whose indexes that would tell
// are damaged too.
func TestRebuildRefusesATablePageThatLostAWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	sqlitetest.StalePages(t, path, "work", `UPDATE work SET state = 'succeeded', claimed_at = 7, instance_id = 'i-1', claim_id = 'c', finished_at = 9, sealed_result = x'0102' WHERE id = 'w-000390'`)
	_, err := Rebuild(ctx, path, filepath.Join(dir, "rebuilt.db"), path, RebuildOptions{})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" {
		t.Fatalf("Rebuild of a work table that lost a unit's end: %v; want a DamagedTablesError naming work", err)
	}

	path = filepath.Join(dir, "audit.db")
	damagedFixture(t, path)
	var inserts []string
	for i := range 20 {
		inserts = append(inserts, fmt.Sprintf(`INSERT INTO audit (at, kind, actor, detail) VALUES (%d, 'test.late', 'test', '%s')`, testNow.UnixNano()+int64(i), strings.Repeat("d", 100)))
	}
	sqlitetest.StalePages(t, path, "audit", inserts...)
	_, err = Rebuild(ctx, path, filepath.Join(dir, "rebuilt-audit.db"), path, RebuildOptions{})
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[audit]" {
		t.Fatalf("Rebuild of an audit table that lost its latest events: %v; want a DamagedTablesError naming audit", err)
	}

	// A unit claimed, read back as queued, with the two indexes that
	// would tell (the queue's and the claimed units') damaged beside it:
	// no index left can confirm the queued units, with salvage neither.
	path = filepath.Join(dir, "hidden.db")
	damagedFixture(t, path)
	sqlitetest.StalePages(t, path, "work", `UPDATE work SET state = 'claimed', claimed_at = 7, instance_id = 'i-9', claim_id = 'c-9' WHERE id = 'w-000390'`)
	for _, ix := range []string{"work_queued", "work_claimed"} {
		sqlitetest.DamageFirstPage(t, path, ix)
	}
	for _, salvage := range []bool{false, true} {
		_, err = Rebuild(ctx, path, filepath.Join(dir, fmt.Sprintf("rebuilt-hidden-%v.db", salvage)), path, RebuildOptions{Salvage: salvage, Now: testNow})
		if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" || !strings.Contains(err.Error(), "its indexes work_queued and work_claimed, which would confirm them, cannot be read") {
			t.Fatalf("Rebuild (salvage %v) of a claimed unit read as queued, the indexes that tell damaged: %v; want a DamagedTablesError naming work", salvage, err)
		}
	}
}

// TestRebuildRefusesRowsChangedWithoutAnError: the work table's page
// holding a queued unit, taken from a copy in which that unit failed,
// reads without an error, and SQLite's integrity_check finds only indexes
// that disagree with it; but two of them (the queue's and the open units'
// by deadline) still list the unit as it was, so Rebuild refuses the table
// rather than rebuild it with the unit changed. And a row of
// schema_migrations, a table without an index, lost from its page (its
// count of cells lowered) is found on that page, and refused.
func TestRebuildRefusesRowsChangedWithoutAnError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	sqlitetest.ChangedPages(t, path, "work", `UPDATE work SET state = 'failed' WHERE id = 'w-000380'`)
	_, err := Rebuild(ctx, path, filepath.Join(dir, "rebuilt.db"), path, RebuildOptions{})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" || !strings.Contains(err.Error(), "differ between its pages and its indexes") {
		t.Fatalf("Rebuild of a work table holding a unit changed: %v; want a DamagedTablesError naming work, from its indexes", err)
	}

	path = filepath.Join(dir, "other.db")
	damagedFixture(t, path)
	lowerCellCount(t, path, sqlitetest.RootPage(t, path, "schema_migrations"), 0x0d)
	_, err = Rebuild(ctx, path, filepath.Join(dir, "rebuilt-other.db"), path, RebuildOptions{})
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[schema_migrations]" {
		t.Fatalf("Rebuild of a schema_migrations that lost a row: %v; want a DamagedTablesError naming schema_migrations", err)
	}
}

// readFilePage reads page p (from 1) of the database file at path (4 KiB
// pages).
func readFilePage(t *testing.T, path string, p int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 4096)
	if _, err := f.ReadAt(b, (p-1)*4096); err != nil {
		t.Fatal(err)
	}
	return b
}

// lowerCellCount lowers by 2 (by 1 when it holds 2) the count of cells in
// the header of page p of the database file at path, which must be of
// type kind (0x0d: a table's leaf): its last rows are then gone, with no
// error when it is read, as a page damaged so would lose them.
func lowerCellCount(t *testing.T, path string, p int64, kind byte) {
	t.Helper()
	hdr := readFilePage(t, path, p)
	if hdr[0] != kind {
		t.Fatalf("page %d is of type %#x, not %#x", p, hdr[0], kind)
	}
	cells := int(hdr[3])<<8 | int(hdr[4])
	by := 2
	if cells <= 2 {
		by = 1
	}
	if cells < 2 {
		t.Fatalf("page %d holds %d rows", p, cells)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{byte((cells - by) >> 8), byte(cells - by)}, (p-1)*4096+3); err != nil {
		t.Fatal(err)
	}
}

// TestRebuildOfADamagedFreelistLosesNothing: units deleted (as a purge
// does) leave their pages on the freelist, still holding what they held;
// with the count of a freelist trunk page lowered, integrity_check says
// some are never used, and their type bytes say table pages. The
// freelist's arrays still name them, so they are free pages, not rows
// lost: Rebuild rebuilds, and every row is as it was.
func TestRebuildOfADamagedFreelistLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	db, err := sql.Open("sqlite", "file:"+uriPath(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM work WHERE rowid BETWEEN 50 AND 300`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	want := dumpTables(t, path)
	first := readFilePage(t, path, 1)
	trunk := int64(first[32])<<24 | int64(first[33])<<16 | int64(first[34])<<8 | int64(first[35])
	if trunk == 0 {
		t.Fatal("the deletes left no freelist")
	}
	hdr := readFilePage(t, path, trunk)
	count := int(hdr[4])<<24 | int(hdr[5])<<16 | int(hdr[6])<<8 | int(hdr[7])
	if count < 4 {
		t.Fatalf("the freelist trunk lists %d pages", count)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte{byte((count - 3) >> 24), byte((count - 3) >> 16), byte((count - 3) >> 8), byte(count - 3)}, (trunk-1)*4096+4)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}

	dst := filepath.Join(dir, "rebuilt.db")
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{})
	if err != nil {
		t.Fatalf("Rebuild with a freelist trunk's count lowered: %v", err)
	}
	if !strings.Contains(strings.Join(rep.Problems, "\n"), "never used") {
		t.Errorf("integrity_check found %q; want pages never used", rep.Problems)
	}
	if got := dumpTables(t, dst); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Error("the rebuilt database's rows differ from the database's before the damage")
	}
}

// TestRebuildFindsAStaleIndexEntryIntegrityCheckDoesNotSee: the pages of
// the queue's index (partial: queued units) written back as they were
// before a unit was claimed still list it as queued, and SQLite's
// integrity_check of this build may say ok; Rebuild compares each index
// with its table all the same, so it does not call the database whole: it
// refuses the table (the file cannot tell which is right), and with
// TrustRows rebuilds the index from the table, the unit claimed and no
// longer queued.
func TestRebuildFindsAStaleIndexEntryIntegrityCheckDoesNotSee(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	sqlitetest.StalePages(t, path, "work_queued", `UPDATE work SET state = 'claimed', claimed_at = 7, instance_id = 'i-9', claim_id = 'c-9' WHERE id = 'w-000390'`)
	t.Logf("SQLite's integrity_check of the stale index: %s", sqlitetest.IntegrityCheck(t, path))
	_, err := Rebuild(ctx, path, filepath.Join(dir, "refused.db"), path, RebuildOptions{})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" || !strings.Contains(err.Error(), "its index work_queued") {
		t.Fatalf("Rebuild of a database whose queue index lists a claimed unit: %v; want a DamagedTablesError naming work and work_queued", err)
	}
	dst := filepath.Join(dir, "rebuilt.db")
	if _, err := Rebuild(ctx, path, dst, path, RebuildOptions{TrustRows: true}); err != nil {
		t.Fatalf("Rebuild trusting the rows: %v", err)
	}
	db, err := sql.Open("sqlite", "file:"+uriPath(dst)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var state string
	var listed int
	if err := db.QueryRow(`SELECT state, (SELECT COUNT(*) FROM work INDEXED BY work_queued WHERE state = 'queued' AND id = 'w-000390') FROM work WHERE id = 'w-000390'`).Scan(&state, &listed); err != nil || state != "claimed" || listed != 0 {
		t.Errorf("the unit in the rebuilt database: %q, listed queued %d times, %v; want claimed, not listed", state, listed, err)
	}
}

// TestTrustingTheRowsNeverQueuesAUnitNoIndexConfirms: with the rows
// trusted, a unit the table holds as queued that an index that can be
// read lists otherwise (a claimed unit read back as queued from a page
// that lost a write) is ended, not queued, and the others stay queued;
// with the indexes that would confirm the queued units damaged too, every
// unit held as queued is ended. And without trusting the rows, a unit that
// ended read back as claimed, the indexes that would tell damaged, is
// refused too (its result would be lost without a word).
func TestTrustingTheRowsNeverQueuesAUnitNoIndexConfirms(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	claim := `UPDATE work SET state = 'claimed', claimed_at = 7, instance_id = 'i-9', claim_id = 'c-9' WHERE id = 'w-000390'`
	queuedIn := func(path string) int {
		t.Helper()
		return int(queryInt(t, path, `SELECT COUNT(*) FROM work NOT INDEXED WHERE state = 'queued'`))
	}

	path := filepath.Join(dir, "stale.db")
	damagedFixture(t, path)
	queued := queuedIn(path)
	sqlitetest.StalePages(t, path, "work", claim)
	dst := filepath.Join(dir, "stale-rebuilt.db")
	rep, err := Rebuild(ctx, path, dst, path, RebuildOptions{TrustRows: true, Now: testNow})
	if err != nil || rep.EndedCount != 1 || fmt.Sprint(rep.Ended) != "[w-000390]" {
		t.Fatalf("Rebuild trusting a table page that lost a unit's claim: ended %v (%d), %v; want w-000390 alone", rep.Ended, rep.EndedCount, err)
	}
	if got := queuedIn(dst); got != queued-1 {
		t.Errorf("%d units queued after the rebuild; want the %d before but w-000390", got, queued-1)
	}

	path = filepath.Join(dir, "hidden.db")
	damagedFixture(t, path)
	sqlitetest.StalePages(t, path, "work", claim)
	for _, ix := range []string{"work_queued", "work_claimed"} {
		sqlitetest.DamageFirstPage(t, path, ix)
	}
	dst = filepath.Join(dir, "hidden-rebuilt.db")
	rep, err = Rebuild(ctx, path, dst, path, RebuildOptions{TrustRows: true, Now: testNow})
	if err != nil || rep.EndedCount != queued {
		t.Fatalf("Rebuild trusting the rows, no index to confirm the queued units: ended %d, %v; want all %d", rep.EndedCount, err, queued)
	}
	if got := queuedIn(dst); got != 0 {
		t.Errorf("%d units queued after the rebuild; want none", got)
	}

	path = filepath.Join(dir, "ended.db")
	damagedFixture(t, path)
	sqlitetest.StalePages(t, path, "work", `UPDATE work SET state = 'succeeded', finished_at = 9, sealed_result = x'0102' WHERE id = 'w-000150'`)
	for _, ix := range []string{"work_claimed", "work_open_deadline"} {
		sqlitetest.DamageFirstPage(t, path, ix)
	}
	_, err = Rebuild(ctx, path, filepath.Join(dir, "ended-rebuilt.db"), path, RebuildOptions{})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" || !strings.Contains(err.Error(), "claimed, and its indexes work_open_deadline and work_claimed, which would confirm them, cannot be read") {
		t.Fatalf("Rebuild of an ended unit read back as claimed, the indexes that tell damaged: %v; want a DamagedTablesError naming work", err)
	}
}

// TestRebuildOfAnOlderSchemaConfirmsTheUnitsByItsOwnIndexes: a database
// at schema version 4, before the partial indexes of queued and claimed
// units, with an index page damaged, has its units' state confirmed by
// the indexes of that version that hold every unit's state: it is rebuilt
// with nothing ended (it was refused, those partial indexes not there to
// read, and trusting its rows ended every queued unit).
func TestRebuildOfAnOlderSchemaConfirmsTheUnitsByItsOwnIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateWith(ctx, db, migrations[:4]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES ('acme', x'01', 1, x'02', 0)`); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := db.Exec(`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline) VALUES (?, 'acme', 'queued', 1, x'03', ?, ?)`,
			fmt.Sprintf("w-%d", i), 1000+i, int64(1e18)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sqlitetest.DamageFirstPage(t, path, "work_queued_at_id")
	for _, trust := range []bool{false, true} {
		rep, err := Rebuild(ctx, path, filepath.Join(dir, fmt.Sprintf("rebuilt-%v.db", trust)), path, RebuildOptions{TrustRows: trust, Now: testNow})
		if err != nil || rep.EndedCount != 0 {
			t.Errorf("Rebuild (rows trusted %v) of a version 4 database with an index damaged: ended %d, %v; want it rebuilt, nothing ended", trust, rep.EndedCount, err)
		}
	}
}

// TestRebuildTakesTheAuditLogsEndOfAUnitOverARolledBackRegion: the pages
// of the work table and of the queue's index that held a unit roll back
// together to before it was claimed and ended (a region of the disk
// rolled back), and agree: it reads as queued, confirmed; the index that
// would tell is damaged. The audit log's work.ended event of the unit,
// written in the transaction that ended it, tells: Rebuild refuses the
// table, and trusting the rows ends the unit rather than queue it again.
func TestRebuildTakesTheAuditLogsEndOfAUnitOverARolledBackRegion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	sqlitetest.StaleRegion(t, path, []string{"work", "work_queued"},
		`UPDATE work SET state = 'succeeded', claimed_at = 7, instance_id = 'i-9', claim_id = 'c-9', finished_at = 9, sealed_result = x'0102' WHERE id = 'w-000390'`,
		`INSERT INTO audit (at, kind, actor, account, work_id, outcome) VALUES (9, 'work.ended', 'test', 'acme', 'w-000390', 'succeeded')`)
	sqlitetest.DamageFirstPage(t, path, "work_open_deadline")
	_, err := Rebuild(ctx, path, filepath.Join(dir, "refused.db"), path, RebuildOptions{Salvage: true, Now: testNow})
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || fmt.Sprint(dt.Tables) != "[work]" || !strings.Contains(err.Error(), "audit log's work.ended events") {
		t.Fatalf("Rebuild of a unit that ended, rolled back with its queue index: %v; want the work table refused by the audit log", err)
	}
	rep, err := Rebuild(ctx, path, filepath.Join(dir, "rebuilt.db"), path, RebuildOptions{TrustRows: true, Now: testNow})
	if err != nil || fmt.Sprint(rep.Ended) != "[w-000390]" {
		t.Fatalf("Rebuild trusting the rows: ended %v, %v; want w-000390 ended, not queued", rep.Ended, err)
	}
}

// TestRebuildFindsAWholeDatabaseWhoseUnitTheAuditLogSaysEnded: the pages
// of the work table and of all its indexes that list open units roll back
// together to before a unit ended, so SQLite's check and the comparison
// of each index with its rows find nothing; the audit log's work.ended
// event of the unit still tells, and the database is not called whole.
func TestRebuildFindsAWholeDatabaseWhoseUnitTheAuditLogSaysEnded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	damagedFixture(t, path)
	sqlitetest.StaleRegion(t, path, []string{"work", "work_queued", "work_open_deadline", "work_unsuccessful", "work_account_unsuccessful"},
		`UPDATE work SET state = 'failed', claimed_at = 7, instance_id = 'i-9', claim_id = 'c-9', finished_at = 9, sealed_result = x'0102' WHERE id = 'w-000390'`,
		`INSERT INTO audit (at, kind, actor, account, work_id, outcome) VALUES (9, 'work.ended', 'test', 'acme', 'w-000390', 'failed')`)
	_, err := Rebuild(ctx, path, filepath.Join(dir, "refused.db"), path, RebuildOptions{Now: testNow})
	var dt *store.DamagedTablesError
	if errors.Is(err, ErrWhole) || !errors.As(err, &dt) || !strings.Contains(err.Error(), "audit log's work.ended events") {
		t.Fatalf("Rebuild of a whole database whose unit the audit log says ended: %v; want the work table refused by the audit log", err)
	}
}
