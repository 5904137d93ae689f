package cli

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
)

// TestACommandRefusesADatabaseThatIsNotAnAutomators: a SQLite file that is
// there but holds no automator schema, emptied to nothing or another
// program's database named by --db, is refused as a missing one is
// (TestACommandRefusesAMissingDatabase), and left as it was: serve would
// otherwise migrate the automator's tables into it and answer every proxy
// and caller from an empty database, and account create would put an
// account where no automator looks for it.
func TestACommandRefusesADatabaseThatIsNotAnAutomators(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// make replaces the database at db.
		make func(t *testing.T, db string)
		want string
	}{
		{"empty", func(t *testing.T, db string) {
			if err := os.WriteFile(db, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, " is empty (no table)"},
		{"another program's", func(t *testing.T, db string) {
			if err := os.Remove(db); err != nil {
				t.Fatal(err)
			}
			other, err := sql.Open("sqlite", db)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if _, err := other.Exec(`CREATE TABLE notes (body TEXT)`); err != nil {
				t.Fatal(err)
			}
		}, " is an SQLite database but not an automator's (its tables are notes, without the automator's schema_migrations, accounts and work)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := initDir(t)
			db := filepath.Join(dir, config.FileDB)
			for _, suffix := range []string{"-wal", "-shm"} {
				if err := os.Remove(db + suffix); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
			tc.make(t, db)
			before := tablesOf(t, db)
			for _, args := range [][]string{
				{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
				{"account", "create", "acme", "--data-dir", dir},
				{"account", "list", "--data-dir", dir},
				{"apikey", "list", "--data-dir", dir},
			} {
				// Bounded: serving the database instead would not return.
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				var out, errb bytes.Buffer
				code := Main(ctx, args, Env{Stdout: &out, Stderr: &errb})
				cancel()
				stdout, stderr := out.String(), errb.String()
				if code != ExitError || !strings.Contains(stderr, db+tc.want) {
					t.Errorf("%s on a database that is not an automator's: exit %d, stdout %q, stderr %q; want exit %d saying %q", strings.Join(args[:2], " "), code, stdout, stderr, ExitError, db+tc.want)
				}
				if after := tablesOf(t, db); !slices.Equal(after, before) {
					t.Fatalf("%s changed the database's tables from %q to %q: want it left as it was", strings.Join(args[:2], " "), before, after)
				}
			}
		})
	}
}

// tablesOf lists the tables of the SQLite database at path, read only.
func tablesOf(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestInitAndRestoreLeaveAnotherProgramsDatabaseAlone: `init --db` naming
// another program's SQLite database added the automator's tables to it,
// and `restore --db` moved it aside and put an automator's in its place,
// where every other command refuses it. Both refuse it now, saying whose
// it is, and leave it as it was: init makes no data directory, restore
// sets nothing aside.
func TestInitAndRestoreLeaveAnotherProgramsDatabaseAlone(t *testing.T) {
	t.Parallel()
	other := filepath.Join(t.TempDir(), "other.db")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('precious')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := tablesOf(t, other)
	want := other + " is an SQLite database but not an automator's (its tables are notes, without the automator's schema_migrations, accounts and work)"

	dir := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runCLI(t, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443", "--db", other)
	if code != ExitError || !strings.Contains(stderr, want) {
		t.Errorf("init --db naming another program's database: exit %d, stderr %q; want %d saying %q", code, stderr, ExitError, want)
	}
	if _, err := os.Stat(filepath.Join(dir, config.FileConfig)); !os.IsNotExist(err) {
		t.Errorf("the refused init left %s: %v", config.FileConfig, err)
	}

	served := initDir(t)
	file := takeBackup(t, served)
	code, _, stderr = runCLI(t, "restore", "--data-dir", served, "--db", other, file)
	if code != ExitError || !strings.Contains(stderr, want) || !strings.Contains(stderr, "nothing was replaced") {
		t.Errorf("restore --db naming another program's database: exit %d, stderr %q; want %d saying %q and that nothing was replaced", code, stderr, ExitError, want)
	}
	if after := tablesOf(t, other); !slices.Equal(after, before) {
		t.Errorf("the other program's database has tables %q after init and restore, want %q", after, before)
	}
	if aside, _ := filepath.Glob(other + ".before-restore-*"); len(aside) > 0 {
		t.Errorf("restore set the other program's database aside: %v", aside)
	}
}
