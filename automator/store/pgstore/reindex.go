package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

// Reindex builds every index of the automator's tables (those of the
// store's schema) again from the tables' rows: PostgreSQL's REINDEX TABLE,
// one table at a time, each committed on its own. It reads nothing of the
// old indexes, so damage to an index (index_corrupted, or data_corrupted
// in an index's file) is repaired with nothing lost. While a table's
// indexes are rebuilt, writes to it wait, and reads that would use them.
// A table whose own pages are damaged fails its REINDEX: the others are
// rebuilt, and the error is a store.DamagedTablesError naming each such
// table. It returns how many tables and indexes it rebuilt.
func (s *Store) Reindex(ctx context.Context) (tables, indexes int, err error) {
	rows, err := s.pool.Query(ctx, `SELECT c.relname, (SELECT COUNT(*) FROM pg_index i WHERE i.indrelid = c.oid)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') ORDER BY c.relname`)
	if err != nil {
		return 0, 0, fmt.Errorf("listing the tables: %w", err)
	}
	type table struct {
		name    string
		indexes int
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		return t, r.Scan(&t.name, &t.indexes)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("listing the tables: %w", err)
	}
	var damaged *store.DamagedTablesError
	for _, t := range list {
		if _, err := s.pool.Exec(ctx, `REINDEX TABLE `+pgx.Identifier{t.name}.Sanitize()); err != nil {
			if !store.IsDamaged(err) {
				return tables, indexes, fmt.Errorf("rebuilding the indexes of table %s: %w", t.name, err)
			}
			if damaged == nil {
				damaged = &store.DamagedTablesError{Err: err}
			}
			damaged.Tables = append(damaged.Tables, t.name)
			continue
		}
		tables++
		indexes += t.indexes
	}
	if damaged != nil {
		return tables, indexes, damaged
	}
	return tables, indexes, nil
}
