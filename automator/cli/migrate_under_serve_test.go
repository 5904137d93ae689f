package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/filelock"
)

// TestACommandDoesNotMigrateTheDatabaseUnderARunningServe: the binary was
// replaced and serve not restarted yet, so serve runs the previous release
// on a database of its schema. A command of the new binary would migrate
// that database under it (opening a store migrates), where serve's
// statements were written for the schema it knows: it is refused, with the
// way out, and leaves the database as it was. Once no serve runs, the same
// command migrates it as before.
func TestACommandDoesNotMigrateTheDatabaseUnderARunningServe(t *testing.T) {
	t.Parallel()
	dir, cfg, dbPath := dataDirOfThePreviousRelease(t)
	serving, err := lockSQLiteForServe(dir, cfg) // as its serve holds it
	if err != nil {
		t.Fatal(err)
	}
	commands := [][]string{
		{"account", "list", "--data-dir", dir},
		{"apikey", "list", "--data-dir", dir},
		{"audit", "--data-dir", dir},
		{"backup", "--data-dir", dir, filepath.Join(t.TempDir(), "b.db")},
	}
	for _, args := range commands {
		code, _, stderr := runCLI(t, args...)
		if code != ExitError || !strings.Contains(stderr, "schema version 8") || !strings.Contains(stderr, "restart serve with this binary first") {
			t.Errorf("%s while serve runs: exit %d, stderr %q; want %d saying the database is at schema version 8 and to restart serve with this binary first", strings.Join(args[:2], " "), code, stderr, ExitError)
		}
		if v := schemaVersion(t, dbPath); v != 8 {
			t.Fatalf("after %s the database is at schema version %d, want 8 as serve left it", strings.Join(args[:2], " "), v)
		}
	}

	// A renewal is made: only its audit record, which would migrate the
	// database, is left out, and the warning says why.
	code, _, stderr := runCLI(t, "cert", "renew", "--data-dir", dir)
	if code != 0 || !strings.Contains(stderr, "not in the audit log") || !strings.Contains(stderr, "restart serve with this binary first") {
		t.Errorf("cert renew while serve runs: exit %d, stderr %q; want 0 and a warning that the renewal is not in the audit log, saying why", code, stderr)
	}
	if v := schemaVersion(t, dbPath); v != 8 {
		t.Fatalf("after cert renew the database is at schema version %d, want 8 as serve left it", v)
	}

	serving.Release()
	if code, _, stderr := runCLI(t, "account", "list", "--data-dir", dir); code != 0 {
		t.Fatalf("account list with no serve running: exit %d: %s", code, stderr)
	}
	if v := schemaVersion(t, dbPath); v == 8 {
		t.Fatal("with no serve running, the command did not migrate the database")
	}
}

// TestACommandMigratesBesideAnotherCommandLookingForAServe: with no serve
// running, two commands of the new binary started together (a backup from
// cron and an operator's listing) each look whether a serve runs on the
// database before migrating it. One's look must not pass for a serve in
// the other's eyes: the command migrates the database, as with no serve.
func TestACommandMigratesBesideAnotherCommandLookingForAServe(t *testing.T) {
	t.Parallel()
	dir, _, dbPath := dataDirOfThePreviousRelease(t)
	// The other command's look, under way (refuseMigratingUnderServe).
	looking, err := filelock.Shared(dbPath + "-serve.lock")
	if err != nil {
		t.Fatal(err)
	}
	defer looking.Release()

	if code, _, stderr := runCLI(t, "account", "list", "--data-dir", dir); code != 0 {
		t.Fatalf("account list while another command looks for a serve (none runs): exit %d: %s", code, stderr)
	}
	if v := schemaVersion(t, dbPath); v == 8 {
		t.Fatal("with no serve running, the command did not migrate the database")
	}
}

// TestServeStartsWhileACommandLooksForAServe: a command looks whether a
// serve runs on the SQLite database by holding its serve lock for a
// moment (refuseMigratingUnderServe). A serve starting during that moment
// (restarted after an upgrade, as a cron backup runs) waits it out, rather
// than failing to start as if another serve used the database.
func TestServeStartsWhileACommandLooksForAServe(t *testing.T) {
	dir := initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	looking, err := filelock.Shared(cfg.DBPath(dir) + "-serve.lock") // the command's look, under way
	if err != nil {
		t.Fatal(err)
	}
	defer looking.Release()
	refused := 0
	serveLockRefused = func() {
		if refused++; refused == 1 {
			looking.Release() // the look ends
		}
	}
	t.Cleanup(func() { serveLockRefused = nil })

	l, err := lockSQLiteForServe(dir, cfg)
	if err != nil {
		t.Fatalf("serve starting while a command looked for a serve: %v; want it to take the lock once the look ended", err)
	}
	l.Release()
	if refused == 0 {
		t.Fatal("serve took the lock a command held")
	}
}

// dataDirOfThePreviousRelease is a data directory whose SQLite database is
// at schema version 8, as the previous release left it.
func dataDirOfThePreviousRelease(t *testing.T) (dir string, cfg config.Config, dbPath string) {
	t.Helper()
	dir = initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	dbPath = cfg.DBPath(dir)
	downgradeToVersion8(t, dbPath)
	return dir, cfg, dbPath
}
