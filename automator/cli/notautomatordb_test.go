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
		}, " is an SQLite database but not an automator's (its tables are notes, without schema_migrations)"},
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
