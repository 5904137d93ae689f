package pgstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestOpenLeavesAnotherApplicationsSchemaAlone: Open on a schema that
// holds another application's tables and not the automator's migrated the
// automator's tables into it (--db naming another application's database
// by mistake); and where that application's migration tool keeps a
// schema_migrations table of its own (golang-migrate, Rails), migrate
// read its versions as the automator's. Open refuses it now, with a
// NotAutomatorsError naming the database, the schema and its tables, and
// leaves every table and row as it was.
func TestOpenLeavesAnotherApplicationsSchemaAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, sql string
		tables    []string
		missing   string
	}{
		{"golang-migrate", `CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL);
INSERT INTO schema_migrations VALUES (3, false);
CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL);
INSERT INTO users (email) VALUES ('ada@example.com')`, []string{"schema_migrations", "users"}, "accounts and work"},
		{"Rails", `CREATE TABLE schema_migrations (version varchar NOT NULL PRIMARY KEY);
INSERT INTO schema_migrations VALUES ('20240101120000'), ('20240202120000');
CREATE TABLE ar_internal_metadata (key varchar PRIMARY KEY, value varchar);
CREATE TABLE accounts (id bigserial PRIMARY KEY, name varchar);
INSERT INTO accounts (name) VALUES ('acme')`, []string{"accounts", "ar_internal_metadata", "schema_migrations"}, "work"},
		{"no migration table", `CREATE TABLE orders (id serial PRIMARY KEY, total numeric);
INSERT INTO orders (total) VALUES (12.50);
CREATE VIEW big_orders AS SELECT * FROM orders WHERE total > 100`, []string{"big_orders", "orders"}, "schema_migrations, accounts and work"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			pgtest.Exec(t, dsn, c.sql)
			before := pgtest.SchemaDump(t, dsn)

			s, err := Open(t.Context(), dsn)
			if err == nil {
				s.Close()
			}
			var e *NotAutomatorsError
			if !errors.As(err, &e) {
				t.Fatalf("Open on another application's schema: %v; want a NotAutomatorsError", err)
			}
			if !slices.Equal(e.Tables, c.tables) || e.Database == "" || !strings.HasPrefix(e.Schema, "t_") {
				t.Errorf("NotAutomatorsError %+v; want the schema t_…, the database and the tables %q", e, c.tables)
			}
			if want := "(without its " + c.missing + ")"; !strings.Contains(err.Error(), want) {
				t.Errorf("Open: %v; want it saying %q", err, want)
			}
			if after := pgtest.SchemaDump(t, dsn); after != before {
				t.Errorf("the refused Open changed the schema:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// TestOpenTakesAnAutomatorsSchemaWithOtherTables: a schema that holds the
// automator's tables, at any version, is the automator's whatever else it
// holds (a database shared with another application on purpose): Open
// migrates and serves it as before, and leaves the other tables alone.
func TestOpenTakesAnAutomatorsSchemaWithOtherTables(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, len(migrations)} {
		t.Run(fmt.Sprintf("version %d", n), func(t *testing.T) {
			t.Parallel()
			dsn, pool := atVersion(t, n)
			pool.Close()
			pgtest.Exec(t, dsn, `CREATE TABLE reports (id serial PRIMARY KEY, body text); INSERT INTO reports (body) VALUES ('kept')`)
			s := open(t, dsn)
			rows := migrationRows(t, s)
			if len(rows) != len(migrations) {
				t.Errorf("schema_migrations holds %d rows after Open, want %d", len(rows), len(migrations))
			}
			if dump := pgtest.SchemaDump(t, dsn); !strings.Contains(dump, "reports: (1,kept)\n") {
				t.Errorf("the other table after Open:\n%s\nwant reports: (1,kept)", dump)
			}
		})
	}
}
