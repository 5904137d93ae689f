//go:build linux

package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// searchPath is the schema pgtest.DSN's URL selects.
func searchPath(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

// TestInitLeavesAnotherApplicationsPostgreSQLDatabaseAlone: `init --db
// postgres://…` naming another application's database migrated the
// automator's tables into it, beside that application's; serve, restore
// --open-work-only and every command that opens the database did the
// same. With a schema_migrations table of that application's own
// (golang-migrate's, at its version 3), they read its versions as the
// automator's and failed on its columns, saying nothing of whose database
// it was. They refuse both now, in one line naming the database, its
// schema and up to five of its tables, and saying what to do; init leaves
// no data directory, and the database keeps its tables and rows, nothing
// added.
func TestInitLeavesAnotherApplicationsPostgreSQLDatabaseAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, sql, tables, missing string
	}{
		{"golang-migrate's schema_migrations", `CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL);
INSERT INTO schema_migrations VALUES (3, false);
CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL);
INSERT INTO users (email) VALUES ('ada@example.com');
CREATE TABLE orders (id serial PRIMARY KEY, user_id integer REFERENCES users (id));
INSERT INTO orders (user_id) VALUES (1);
CREATE TABLE invoices (id serial PRIMARY KEY);
CREATE TABLE products (id serial PRIMARY KEY);
CREATE TABLE sessions (id serial PRIMARY KEY)`, "invoices, orders, products, schema_migrations, sessions, …", "accounts and work"},
		{"no schema_migrations", `CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL);
INSERT INTO users (email) VALUES ('ada@example.com')`, "users", "schema_migrations, accounts and work"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			other := pgtest.DSN(t)
			pgtest.Exec(t, other, c.sql)
			before := pgtest.SchemaDump(t, other)
			want := fmt.Sprintf("the database %s is a PostgreSQL database but not an automator's (the tables of its schema %s are %s, without the automator's %s), and the automator's tables are not added to it: --db, or db in %s, names another application's database; give the automator a database of its own, or a schema of its own in this one (search_path in the URL)",
				pgstore.Redact(other), searchPath(t, other), c.tables, c.missing, config.FileConfig)

			dir := filepath.Join(t.TempDir(), "data")
			code, _, stderr := runMain(t, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443", "--db", other)
			if code != ExitError || !strings.Contains(stderr, want) {
				t.Errorf("init --db naming another application's PostgreSQL database: exit %d, stderr %q; want %d saying %q", code, stderr, ExitError, want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the refused init left its data directory %s (%v)", dir, err)
			}
			if after := pgtest.SchemaDump(t, other); after != before {
				t.Fatalf("the refused init changed the other application's schema:\n%s\nwas:\n%s", after, before)
			}

			// A data directory of its own (SQLite), each command given --db.
			served := initDir(t)
			for _, args := range [][]string{
				{"serve", "--data-dir", served, "--db", other, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
				{"account", "create", "acme", "--data-dir", served, "--db", other},
				{"apikey", "list", "--data-dir", served, "--db", other},
				{"restore", "--data-dir", served, "--db", other, "--open-work-only"},
			} {
				// Bounded: serving the database instead would not return.
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				var out, errb bytes.Buffer
				code := Main(ctx, args, Env{Stdout: &out, Stderr: &errb})
				cancel()
				if code != ExitError || !strings.Contains(errb.String(), want) {
					t.Errorf("%s --db naming another application's PostgreSQL database: exit %d, stdout %q, stderr %q; want exit %d saying %q", strings.Join(args[:2], " "), code, out.String(), errb.String(), ExitError, want)
				}
				if after := pgtest.SchemaDump(t, other); after != before {
					t.Fatalf("%s changed the other application's schema:\n%s\nwas:\n%s", strings.Join(args[:2], " "), after, before)
				}
			}
		})
	}
}

// TestAnAutomatorsPostgreSQLDatabaseKeepsWorkingBesideOtherTables: init
// into an empty database (schema) makes the automator's there, as before;
// and a database holding the automator's tables is the automator's
// whatever else it holds, so one shared with another application on
// purpose, whose tables came after the automator's, keeps working: its
// commands open it, and the other tables are left alone.
func TestAnAutomatorsPostgreSQLDatabaseKeepsWorkingBesideOtherTables(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	dir := filepath.Join(t.TempDir(), "data")
	if code, _, stderr := runMain(t, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443", "--db", dsn); code != 0 {
		t.Fatalf("init into an empty PostgreSQL schema: exit %d: %s", code, stderr)
	}
	pgtest.Exec(t, dsn, `CREATE TABLE reports (id serial PRIMARY KEY, body text NOT NULL);
INSERT INTO reports (body) VALUES ('kept')`)
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create on the automator's database beside another table: exit %d: %s", code, stderr)
	}
	if code, stdout, stderr := runMain(t, "account", "list", "--data-dir", dir); code != 0 || !strings.Contains(stdout, "acme") {
		t.Errorf("account list: exit %d, stdout %q, stderr %q; want acme listed", code, stdout, stderr)
	}
	if rows := pgtest.SchemaDump(t, dsn); !strings.Contains(rows, "reports: (1,kept)\n") {
		t.Errorf("the other table after the commands:\n%s\nwant reports: (1,kept)", rows)
	}
}
