package cli

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/sqlitetest"
)

// damageTable damages the first page of the table or index name of the
// data directory's database (sqlitetest.DamageFirstPage) and returns the
// database's path.
func damageTable(t *testing.T, dir, name string) string {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sqlitetest.DamageFirstPage(t, cfg.DBPath(dir), name)
	return cfg.DBPath(dir)
}

// TestRepairRefusesADatabaseWhoseRowsAreDamagedAndChangesNothing: with
// the work table's own page damaged, repair says which table, that a
// backup is the way back, and leaves the database and the data directory
// as they were.
func TestRepairRefusesADatabaseWhoseRowsAreDamagedAndChangesNothing(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	path := damageTable(t, dir, "work")
	before := fileBytes(t, path)

	code, stdout, stderr := runCLI(t, "repair", "--data-dir", dir)
	if code != ExitError || stdout != "" {
		t.Fatalf("repair of a damaged work table: exit %d, stdout %q, stderr %q; want %d", code, stdout, stderr, ExitError)
	}
	for _, want := range []string{path + ": the rows of table work are damaged", "restore the latest backup instead (`automator restore --data-dir " + dir + " FILE`", "nothing was changed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("repair said %q; want it to say %q", stderr, want)
		}
	}
	if !bytes.Equal(fileBytes(t, path), before) {
		t.Error("a refused repair changed the database")
	}
	if left, _ := filepath.Glob(path + ".*"); len(left) != 0 {
		t.Errorf("a refused repair left files behind: %v", left)
	}
}

// TestACommandOnADamagedDatabaseSaysWhatToDo: a command whose reads meet
// the damage says so, and where to look.
func TestACommandOnADamagedDatabaseSaysWhatToDo(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	damageTable(t, dir, "work")
	code, _, stderr := runCLI(t, "work", "list", "--data-dir", dir)
	if code != ExitError || !strings.Contains(stderr, "database disk image is malformed") || !strings.Contains(stderr, "(the database is damaged: `automator repair` rebuilds it, with SQLite once serve is stopped, or says what to do; see docs/backup.md)") {
		t.Errorf("work list on a damaged database: exit %d, stderr %q", code, stderr)
	}
}

// TestRepairOfAPostgreSQLDatabaseRebuildsItsIndexes: on PostgreSQL,
// repair rebuilds every index of the automator's tables from their rows
// (pgstore.Reindex; the damage itself is test/chaos's
// TestReindexRepairsADamagedPostgreSQLIndexAndNamesADamagedTable), says
// so without the password, and records it in the audit log.
func TestRepairOfAPostgreSQLDatabaseRebuildsItsIndexes(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	if code, _, stderr := runCLI(t, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443", "--db", dsn); code != 0 {
		t.Fatalf("init: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "repair", "--data-dir", dir, "--db", dsn)
	if code != 0 || !strings.Contains(stdout, "indexes of the ") || !strings.Contains(stdout, "from their rows (REINDEX TABLE)") || (password(t, dsn) != "" && strings.Contains(stdout+stderr, password(t, dsn))) {
		t.Fatalf("repair on PostgreSQL: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "audit", "--data-dir", dir, "--db", dsn, "--kind", "database.repair")
	if code != 0 || !strings.Contains(stdout, "indexes rebuilt from their tables' rows (REINDEX)") {
		t.Errorf("the audit log of the repair: exit %d, %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, "repair", "--data-dir", dir, "extra"); code != ExitError || !strings.Contains(stderr, `repair takes no arguments, got ["extra"]`) {
		t.Errorf("repair with an argument: exit %d, stderr %q", code, stderr)
	}
}

// password is the password of the URL dsn ("" for none).
func password(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := u.User.Password()
	return p
}

// TestRepairOfADatabaseCutShortPointsToTheBackup: a database file cut
// short (a copy that did not finish) cannot be rebuilt; repair says so,
// points to the backup rather than to itself, and changes nothing.
func TestRepairOfADatabaseCutShortPointsToTheBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := cfg.DBPath(dir)
	if err := os.Truncate(path, 3*4096); err != nil {
		t.Fatal(err)
	}
	before := fileBytes(t, path)
	code, stdout, stderr := runCLI(t, "repair", "--data-dir", dir)
	if code != ExitError || stdout != "" || !strings.Contains(stderr, "is cut short") || !strings.Contains(stderr, "restore the latest backup instead") || strings.Contains(stderr, "`automator repair` rebuilds it") {
		t.Errorf("repair of a database cut short: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !bytes.Equal(fileBytes(t, path), before) {
		t.Error("a refused repair changed the database")
	}
}

// TestRepairTrustingTheRowsRebuildsIndexesThatListThemOtherwise: an
// index page that lists a unit with another value than its table holds
// (taken from a copy in which it had it) cannot be told from the table's
// page having lost a write: repair refuses, and says how to take the
// table as right (not --salvage, which would refuse it too); with
// --trust-rows it rebuilds, and the unit, queued, is ended rather than
// queued: its row in doubt, it may have been claimed and run.
func TestRepairTrustingTheRowsRebuildsIndexesThatListThemOtherwise(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := cfg.DBPath(dir)
	sqlitetest.ChangedPages(t, path, "work_queued_at_id", `UPDATE work SET queued_at = queued_at + 1 WHERE id = 'w-queued'`)
	before := fileBytes(t, path)
	code, _, stderr := runCLI(t, "repair", "--data-dir", dir)
	if code != ExitError || !strings.Contains(stderr, "differ between its pages and its index work_queued_at_id") || !strings.Contains(stderr, "run repair again with --trust-rows") ||
		strings.Contains(stderr, "--salvage") {
		t.Fatalf("repair with an index listing a unit otherwise: exit %d, stderr %q; want --trust-rows named, not --salvage, which refuses it too", code, stderr)
	}
	if !bytes.Equal(fileBytes(t, path), before) {
		t.Error("a refused repair changed the database")
	}
	code, stdout, stderr := runCLI(t, "repair", "--data-dir", dir, "--trust-rows")
	if code != 0 || !strings.Contains(stdout, "rebuilt it from its tables' rows") ||
		!strings.Contains(stdout, "ended 1 unit held as queued that no index confirmed (w-queued): each may have been claimed and run already") {
		t.Fatalf("repair --trust-rows: exit %d, stdout %q, stderr %q; want the queued unit the index listed otherwise ended", code, stdout, stderr)
	}
	if check := sqlitetest.IntegrityCheck(t, path); check != "ok" {
		t.Errorf("integrity_check after repair --trust-rows: %s", check)
	}
}

// TestRepairSalvagesTheUnitsItCanAndKeepsTheLostOnesEnded: with the work
// table's only page damaged, repair refuses and names --salvage; with it,
// it rebuilds the database, names each unit lost as the indexes kept it
// (the claimed one as maybe run), keeps each as ended (failed) with a
// reason that says so, which `work show --reveal` shows without its
// command, and records what was lost in the audit log.
func TestRepairSalvagesTheUnitsItCanAndKeepsTheLostOnesEnded(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	path := damageTable(t, dir, "work")
	code, _, stderr := runCLI(t, "repair", "--data-dir", dir)
	if code != ExitError || !strings.Contains(stderr, "or run repair again with --salvage, which keeps the rows that can be read and names those lost") {
		t.Fatalf("repair of a damaged work table: exit %d, stderr %q; want it to name --salvage", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "repair", "--data-dir", dir, "--salvage")
	if code != 0 {
		t.Fatalf("repair --salvage: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, want := range []string{"salvaged it: rebuilt it from the rows of its tables that could be read",
		"lost: 3 rows of table work (unit w-done (account acme, ended, or its state not known), unit w-claimed (account acme, claimed: its script may have run), unit w-queued (account acme, queued)), 3 of them kept as ended\n",
		"its caller gets it as timed out (it may have run), and a retry with its idempotency key returns it rather than running its script again"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("repair --salvage said %q; want it to say %q", stdout, want)
		}
	}
	if check := sqlitetest.IntegrityCheck(t, path); check != "ok" {
		t.Errorf("integrity_check after repair --salvage: %s", check)
	}
	code, stdout, stderr = runCLI(t, "work", "show", "w-claimed", "--data-dir", dir, "--reveal")
	if code != 0 || !strings.Contains(stdout, "timed_out") || !strings.Contains(stdout, "whether its script ran is not known (last seen claimed: its script may have run)") || !strings.Contains(stdout, "(lost with its row)") {
		t.Errorf("work show --reveal of a lost unit: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "audit", "--data-dir", dir, "--kind", "database.repair")
	if code != 0 || !strings.Contains(stdout, "salvaged, and lost 3 rows of table work") {
		t.Errorf("the audit log of the salvage: exit %d, %q", code, stdout)
	}
}
