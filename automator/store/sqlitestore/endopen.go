package sqlitestore

import (
	"context"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

// openWorkQuery: the open units, oldest first. Its state term is
// work_open_deadline's WHERE, word for word: SQLite uses a partial index
// only for a query whose WHERE implies the index's.
const openWorkQuery = `SELECT ` + workColumnsWithoutSealed + ` FROM work
WHERE state IN ('queued', 'claimed')
ORDER BY queued_at, id
LIMIT ?`

func (s *Store) WorkEndOpen(ctx context.Context, p store.WorkEndOpenParams) ([]store.Work, error) {
	limit := -1 // SQLite: no limit
	if p.Max > 0 {
		limit = p.Max
	}
	ended, err := s.timeOut(ctx, toNanos(p.Now), func(ctx context.Context, tx querier) ([]store.Work, error) {
		return queryWork(ctx, tx, openWorkQuery, limit)
	}, func(o store.Work) string { return store.EndOpenReason(p.Reason, o) }, p.Audit)
	if err != nil {
		return nil, fmt.Errorf("ending the open units: %w", err)
	}
	return ended, nil
}

// queryWork returns the units query selects (workColumns) with args.
func queryWork(ctx context.Context, tx querier, query string, args ...any) ([]store.Work, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ws []store.Work
	for rows.Next() {
		w, err := scanWork(rows)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, rows.Err()
}
