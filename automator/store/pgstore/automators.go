package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/prose"
)

// NotAutomatorsError is the error of Open for a database whose schema (the
// first of the connection's search_path that exists, where the automator's
// tables are made) holds tables of another application and none of the
// automator's schema: the automator's tables are not added to it.
type NotAutomatorsError struct {
	// Database and Schema name where the tables are.
	Database, Schema string
	// Tables are the schema's tables (and views), by name.
	Tables []string
}

func (e *NotAutomatorsError) Error() string {
	return fmt.Sprintf("schema %s of database %s holds tables (%s) but not an automator's (without its %s): another application's, to which the automator's tables are not added",
		e.Schema, e.Database, prose.Some(e.Tables, 5), prose.And(e.Missing()))
}

// Missing returns those of schema_migrations, accounts and work that the
// schema lacks.
func (e *NotAutomatorsError) Missing() []string { return store.MissingAutomatorTables(e.Tables) }

// schemaTables returns the names of the tables, views and foreign tables
// of the connection's current schema (where the automator's tables are
// made and found), in order: the partitions of a partitioned table and
// what an extension made there (PostGIS's spatial_ref_sys, the views of
// pg_stat_statements) are left out, being no application's.
func schemaTables(ctx context.Context, tx pgx.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname::text
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema()
	AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
	AND NOT c.relispartition
	AND NOT EXISTS (SELECT 1 FROM pg_depend d
		WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
ORDER BY c.relname COLLATE "C"`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// refuseOtherApplications refuses, in the migration's transaction and
// under its lock, a schema that holds tables but none of the automator's
// schema: another application's database that --db names by mistake (or
// one shared with it, without a schema of the automator's own), which
// migrating would fill with the automator's tables, and whose own
// schema_migrations, if it has one, would be read as the automator's
// versions.
//
// Only a schema the automator's tables are not in yet is refused, where
// the first migration would add them: an empty one (a new database or
// schema, the normal first init) is migrated, and so is one that holds
// the automator's schema (schema_migrations, accounts and work) at any
// version, whatever else it holds. An operator may have shared one
// database between the automator and other applications on purpose (a
// managed PostgreSQL with one database per team, say) before this check
// existed: refusing it now would stop a working installation at its next
// upgrade, while what the check guards against, the automator's tables
// added to another application's schema, happened then already and is
// not undone by a refusal. A schema the automator's migrations made is
// never half made (they run in one transaction), so schema_migrations
// without accounts or work is not the automator's either.
//
// Replicas starting together on an empty schema do not refuse each other:
// the check runs after the migration lock is taken, so the replicas behind
// the first find the automator's tables it committed.
func refuseOtherApplications(ctx context.Context, tx pgx.Tx, schema string) error {
	tables, err := schemaTables(ctx, tx)
	if err != nil {
		return fmt.Errorf("reading the tables of schema %s: %w", schema, err)
	}
	if len(tables) == 0 || len(store.MissingAutomatorTables(tables)) == 0 {
		return nil
	}
	e := &NotAutomatorsError{Schema: schema, Tables: tables}
	if err := tx.QueryRow(ctx, `SELECT current_database()`).Scan(&e.Database); err != nil {
		return fmt.Errorf("reading the database's name: %w", err)
	}
	return e
}
