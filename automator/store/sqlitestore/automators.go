package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/prose"
)

// IsAutomators tells whether a database whose tables are tables (as
// TableNames returns them) is an automator's: it has every one of
// store.AutomatorTables.
func IsAutomators(tables []string) bool {
	return len(store.MissingAutomatorTables(tables)) == 0
}

// NotAutomatorsError is the error of Open for a database that holds
// tables but not an automator's schema (IsAutomators): another program's,
// to which the automator's tables are not added. It matches
// ErrNotAutomatorDB.
type NotAutomatorsError struct {
	// Tables are the database's tables, by name.
	Tables []string
}

func (e *NotAutomatorsError) Error() string {
	return fmt.Sprintf("the database holds tables (%s) but not an automator's (without its %s): another program's database, to which the automator's tables are not added",
		prose.Some(e.Tables, 5), prose.And(store.MissingAutomatorTables(e.Tables)))
}

// Is makes a NotAutomatorsError match ErrNotAutomatorDB.
func (e *NotAutomatorsError) Is(target error) bool { return target == ErrNotAutomatorDB }

// tableNames returns the names of the tables of the database q reads, in
// order.
func tableNames(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, rows.Err()
}

// refuseOtherPrograms refuses, in migrate's transaction, a database that
// holds tables but not an automator's schema (a NotAutomatorsError): the
// steps would add the automator's tables to another program's database,
// or, finding its schema_migrations, take that program's versions for the
// automator's. A database without tables (a new file) is migrated; SQLite's
// own tables (sqlite_sequence, sqlite_stat1, …) are not another program's.
func refuseOtherPrograms(ctx context.Context, tx *sql.Tx) error {
	tables, err := tableNames(ctx, tx)
	if err != nil {
		return fmt.Errorf("reading the tables: %w", err)
	}
	if IsAutomators(tables) || !slices.ContainsFunc(tables, func(name string) bool { return !strings.HasPrefix(name, "sqlite_") }) {
		return nil
	}
	return &NotAutomatorsError{Tables: tables}
}
