package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	limit := -1 // SQLite: no limit
	if p.Max > 0 {
		limit = p.Max
	}
	now := toNanos(p.Now)
	expired, err := s.timeOut(ctx, now, func(ctx context.Context, tx querier) ([]store.Work, error) {
		return dueWork(ctx, tx, now, limit)
	}, store.ExpireReason, p.Audit)
	if err != nil {
		return nil, fmt.Errorf("expiring work due by %s: %w", p.Now.Format(time.RFC3339Nano), err)
	}
	return expired, nil
}

// timeOut moves each unit read returns to timed_out, with the reason
// reasonFor gives it, only while it is still in the state it was read in,
// and appends audit (when not nil) for each it moved, in one write
// transaction. It returns the units it moved (WorkExpire, WorkEndOpen).
func (s *Store) timeOut(ctx context.Context, now int64, read func(context.Context, querier) ([]store.Work, error), reasonFor func(store.Work) string, audit *store.AuditEvent) ([]store.Work, error) {
	var moved []store.Work
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		moved = moved[:0]
		units, err := read(ctx, tx)
		if err != nil {
			return err
		}
		for _, u := range units {
			w, err := scanWork(tx.QueryRowContext(ctx, `UPDATE work
SET state = 'timed_out', reason = ?, finished_at = ?
WHERE id = ? AND state = ?
RETURNING `+workColumns,
				reasonFor(u), now, u.ID, string(u.State)))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			if audit != nil {
				if _, err := insertAudit(ctx, tx, audit.ForWork(w)); err != nil {
					return err
				}
			}
			moved = append(moved, w)
		}
		return nil
	})
	return moved, err
}

// dueWorkQuery: the open units whose deadline is at or before now. Its state
// term is work_open_deadline's WHERE, word for word: SQLite uses a partial
// index only for a query whose WHERE implies the index's.
const dueWorkQuery = `SELECT ` + workColumns + ` FROM work
WHERE state IN ('queued', 'claimed') AND deadline <= ?
ORDER BY deadline, id
LIMIT ?`

// dueWork returns the open units whose deadline is at or before now, earliest
// deadline first.
func dueWork(ctx context.Context, tx querier, now int64, limit int) ([]store.Work, error) {
	rows, err := tx.QueryContext(ctx, dueWorkQuery, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var due []store.Work
	for rows.Next() {
		w, err := scanWork(rows)
		if err != nil {
			return nil, err
		}
		due = append(due, w)
	}
	return due, rows.Err()
}
