package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

// openWorkQuery: the open units, oldest first. Its state term is
// work_open_deadline's WHERE, word for word: SQLite uses a partial index
// only for a query whose WHERE implies the index's.
const openWorkQuery = `SELECT ` + workColumns + ` FROM work
WHERE state IN ('queued', 'claimed')
ORDER BY queued_at, id
LIMIT ?`

func (s *Store) WorkEndOpen(ctx context.Context, p store.WorkEndOpenParams) ([]store.Work, error) {
	limit := -1 // SQLite: no limit
	if p.Max > 0 {
		limit = p.Max
	}
	now := toNanos(p.Now)
	var ended []store.Work
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		ended = ended[:0]
		open, err := queryWork(ctx, tx, openWorkQuery, limit)
		if err != nil {
			return err
		}
		for _, o := range open {
			w, err := scanWork(tx.QueryRowContext(ctx, `UPDATE work
SET state = 'timed_out', reason = ?, finished_at = ?
WHERE id = ? AND state = ?
RETURNING `+workColumns,
				store.EndOpenReason(p.Reason, o), now, o.ID, string(o.State)))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			if p.Audit != nil {
				if _, err := insertAudit(ctx, tx, p.Audit.ForWork(w)); err != nil {
					return err
				}
			}
			ended = append(ended, w)
		}
		return nil
	})
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
