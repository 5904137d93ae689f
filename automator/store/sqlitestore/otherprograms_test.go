package sqlitestore

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// golangMigrateDB makes at path another program's database whose migration
// tool (golang-migrate) keeps a schema_migrations table of its own, of
// another shape, at its version 3.
func golangMigrateDB(t *testing.T, path string) {
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

// TestOpenLeavesAnotherProgramsDatabaseAlone: Open took a database with a
// table named schema_migrations for an automator's, read the other
// program's versions there as its own (version 3: it applied the steps
// after it, failing on tables it never made; a timestamp version: "newer
// than this binary knows"), and added the automator's tables to a
// database without one. It refuses both now, matching ErrNotAutomatorDB,
// and leaves their tables and rows as they were; SchemaVersion says 0
// for them, as for an empty file.
func TestOpenLeavesAnotherProgramsDatabaseAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		make    func(t *testing.T, path string)
		tables  []string
		missing string
	}{
		{"golang-migrate", golangMigrateDB, []string{"schema_migrations", "users"}, "accounts and work"},
		{"no schema_migrations", func(t *testing.T, path string) {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('precious')`); err != nil {
				t.Fatal(err)
			}
		}, []string{"notes"}, "schema_migrations, accounts and work"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "other.db")
			c.make(t, path)
			before := dumpDB(t, path)

			if v, _, err := SchemaVersion(t.Context(), path); v != 0 || err != nil {
				t.Errorf("SchemaVersion = %d, %v; want 0 (not an automator's database)", v, err)
			}
			s, err := Open(t.Context(), path)
			if err == nil {
				s.Close()
			}
			var e *NotAutomatorsError
			if !errors.As(err, &e) || !errors.Is(err, ErrNotAutomatorDB) || !slices.Equal(e.Tables, c.tables) {
				t.Fatalf("Open: %v; want a NotAutomatorsError, matching ErrNotAutomatorDB, with the tables %q", err, c.tables)
			}
			if want := "(without its " + c.missing + ")"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Open: %v; want it naming %s and saying %q", err, path, want)
			}
			if after := dumpDB(t, path); after != before {
				t.Errorf("the refused Open changed the database:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// TestEverySchemaVersionIsAnAutomators: what tells an automator's database
// from another program's (IsAutomators: schema_migrations, accounts and
// work) holds at every schema version, the first releases' version 1
// included, so no database an automator made is refused as another
// program's once an automator of this release opens it.
func TestEverySchemaVersionIsAnAutomators(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	steps := [][]migration{{firstReleasesV1}}
	for n := 1; n <= len(migrations); n++ {
		steps = append(steps, migrations[:n])
	}
	for i, s := range steps {
		path := filepath.Join(dir, fmt.Sprintf("v%d.db", i))
		db, err := sql.Open("sqlite", dsn(path, false))
		if err != nil {
			t.Fatal(err)
		}
		err = migrateWith(t.Context(), db, s)
		db.Close()
		if err != nil {
			t.Fatalf("migrating to version %d: %v", s[len(s)-1].version, err)
		}
		tables, err := TableNames(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		if !IsAutomators(tables) {
			t.Errorf("a database at version %d (tables %q) is not IsAutomators", s[len(s)-1].version, tables)
		}
		if _, err := Inspect(t.Context(), path, path); err != nil {
			t.Errorf("Inspect of a database at version %d: %v", s[len(s)-1].version, err)
		}
	}
}

// dumpDB is the tables of the SQLite database at path with their rows,
// read only, to tell whether any changed. (Not its bytes: Open's first
// connection puts the file in WAL mode before migrate looks at it.)
func dumpDB(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tables, err := tableNames(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, table := range tables {
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
		rows.Close()
		b.WriteString("\n")
	}
	return b.String()
}
