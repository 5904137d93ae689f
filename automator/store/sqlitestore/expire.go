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
	var expired []store.Work
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		expired = expired[:0]
		due, err := dueWork(ctx, tx, now, limit)
		if err != nil {
			return err
		}
		for _, d := range due {
			w, err := scanWork(tx.QueryRowContext(ctx, `UPDATE work
SET state = 'timed_out', reason = ?, finished_at = ?
WHERE id = ? AND state = ?
RETURNING `+workColumns,
				expireReason(d), now, d.ID, string(d.State)))
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
			expired = append(expired, w)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expiring work due by %s: %w", p.Now.Format(time.RFC3339Nano), err)
	}
	return expired, nil
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

// expireReason says whether the unit was ever claimed and by whom: the one
// clue an operator has when a claimer died.
func expireReason(w store.Work) string {
	if w.State == store.StateClaimed {
		return fmt.Sprintf("claimed by instance %s at %s, no result before the deadline",
			w.InstanceID, w.ClaimedAt.UTC().Format(time.RFC3339Nano))
	}
	return "no instance claimed it before the deadline"
}
