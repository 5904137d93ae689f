package cli

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
)

// makeGolangMigrateDB makes at path another program's SQLite database
// whose migration tool (golang-migrate) keeps a schema_migrations table of
// its own, of another shape (version, dirty), at its version 3, beside its
// users table.
func makeGolangMigrateDB(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL);
INSERT INTO schema_migrations VALUES (3, false);
CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL);
INSERT INTO users (email) VALUES ('ada@example.com')`); err != nil {
		t.Fatal(err)
	}
}

// golangMigrateRefusal is what every command says of the database
// makeGolangMigrateDB made at path.
func golangMigrateRefusal(path string) string {
	return path + " is an SQLite database but not an automator's (its tables are schema_migrations, users, without the automator's accounts and work), and the automator's tables are not added to it: --db, or db in " + config.FileConfig + ", names another program's database"
}

// rowsOf is every table of the SQLite database at path with its columns
// and rows, read only.
func rowsOf(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b strings.Builder
	for _, table := range tablesOf(t, path) {
		rows, err := db.Query(`SELECT * FROM "` + table + `"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		fmt.Fprintf(&b, "%s (%s):", table, strings.Join(cols, ", "))
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, " %v", vals)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		b.WriteString("\n")
	}
	return b.String()
}

// dbFileState is the content of the file at path, and whether a write-ahead
// log is beside it.
func dbFileState(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, walErr := os.Stat(path + "-wal")
	return fmt.Sprintf("%x (-wal beside it: %v)", data, walErr == nil)
}

// TestInitAndRestoreLeaveADatabaseWithAnotherProgramsSchemaMigrationsAlone:
// a table named schema_migrations was all init and restore looked for in
// a database --db names, and many programs' migration tools keep one
// (golang-migrate, Rails, dbmate, Ecto). init then took another program's
// database for an automator's and migrated it, reading that program's
// version 3 as the automator's (it failed on a table it never made,
// saying so and nothing of whose database it was); restore set it aside
// and put an automator's in its place. Both refuse it now as they refuse
// one without schema_migrations, naming its tables and the automator's it
// lacks, and leave the file as it was, byte for byte: init makes no data
// directory, restore sets nothing aside. backup, which opens the
// database as the store does, refuses it too, its tables and rows
// untouched.
func TestInitAndRestoreLeaveADatabaseWithAnotherProgramsSchemaMigrationsAlone(t *testing.T) {
	t.Parallel()
	other := filepath.Join(t.TempDir(), "other.db")
	makeGolangMigrateDB(t, other)
	rows, file := rowsOf(t, other), dbFileState(t, other)
	unchanged := func(after string) {
		t.Helper()
		if got := rowsOf(t, other); got != rows {
			t.Errorf("the other program's database after %s:\n%s\nwant it as it was:\n%s", after, got, rows)
		} else if got := dbFileState(t, other); got != file {
			t.Errorf("the other program's database file changed by %s (its tables and rows did not)", after)
		}
	}
	want := golangMigrateRefusal(other)

	dir := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runCLI(t, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443", "--db", other)
	if code != ExitError || !strings.Contains(stderr, want) {
		t.Errorf("init --db naming another program's database with a schema_migrations: exit %d, stderr %q; want %d saying %q", code, stderr, ExitError, want)
	}
	if _, err := os.Stat(filepath.Join(dir, config.FileConfig)); !os.IsNotExist(err) {
		t.Errorf("the refused init left %s: %v", config.FileConfig, err)
	}
	unchanged("init")

	served := initDir(t)
	backup := takeBackup(t, served)
	code, _, stderr = runCLI(t, "restore", "--data-dir", served, "--db", other, backup)
	if code != ExitError || !strings.Contains(stderr, want) || !strings.Contains(stderr, "nothing was replaced") {
		t.Errorf("restore --db naming another program's database with a schema_migrations: exit %d, stderr %q; want %d saying %q and that nothing was replaced", code, stderr, ExitError, want)
	}
	if aside, _ := filepath.Glob(other + ".before-restore-*"); len(aside) > 0 {
		t.Errorf("restore set the other program's database aside: %v", aside)
	}
	unchanged("restore")

	code, _, stderr = runCLI(t, "backup", "--data-dir", served, "--db", other, filepath.Join(t.TempDir(), "b.db"))
	if code != ExitError || !strings.Contains(stderr, "but not an automator's (without its accounts and work)") {
		t.Errorf("backup --db naming another program's database with a schema_migrations: exit %d, stderr %q; want %d saying it is not an automator's", code, stderr, ExitError)
	}
	if got := rowsOf(t, other); got != rows {
		t.Errorf("the other program's database after backup:\n%s\nwant it as it was:\n%s", got, rows)
	}
}

// TestACommandRefusesADatabaseWithAnotherProgramsSchemaMigrations: a data
// directory whose database is another program's, with a schema_migrations
// table of its own, is refused by serve and every command that opens the
// database, as one without it is
// (TestACommandRefusesADatabaseThatIsNotAnAutomators): they took it for
// an automator's at that program's version 3 and migrated it from there.
// The file is left as it was, byte for byte.
func TestACommandRefusesADatabaseWithAnotherProgramsSchemaMigrations(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	db := filepath.Join(dir, config.FileDB)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(db + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	makeGolangMigrateDB(t, db)
	rows, file := rowsOf(t, db), dbFileState(t, db)
	want := golangMigrateRefusal(db)
	for _, args := range [][]string{
		{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
		{"account", "create", "acme", "--data-dir", dir},
		{"account", "list", "--data-dir", dir},
		{"apikey", "list", "--data-dir", dir},
		{"restore", "--data-dir", dir, "--open-work-only"},
	} {
		// Bounded: serving the database instead would not return.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var out, errb bytes.Buffer
		code := Main(ctx, args, Env{Stdout: &out, Stderr: &errb})
		cancel()
		if code != ExitError || !strings.Contains(errb.String(), want) {
			t.Errorf("%s on another program's database with a schema_migrations: exit %d, stdout %q, stderr %q; want exit %d saying %q", strings.Join(args[:2], " "), code, out.String(), errb.String(), ExitError, want)
		}
		if got := rowsOf(t, db); got != rows {
			t.Fatalf("%s changed the database:\n%s\nwant it as it was:\n%s", strings.Join(args[:2], " "), got, rows)
		}
		if got := dbFileState(t, db); got != file {
			t.Fatalf("%s changed the database file (its tables and rows did not)", strings.Join(args[:2], " "))
		}
	}
}
