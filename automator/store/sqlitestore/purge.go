package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// WorkPurge deletes the oldest ended units queued before p.QueuedBefore, up
// to p.Max in one write (work_queued_at_id finds them in queue order).
func (s *Store) WorkPurge(ctx context.Context, p store.WorkPurgeParams) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM work WHERE id IN (
SELECT id FROM work
WHERE queued_at < ? AND state IN ('succeeded', 'failed', 'timed_out', 'cancelled')
ORDER BY queued_at, id
LIMIT ?)`, toNanos(p.QueuedBefore), max(p.Max, 1))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		// Accounts being deleted (delete.go) with no unit left to move,
		// which frees their names, audited as AccountDelete audits the
		// deletions it finishes; then the tombstones of deleted accounts
		// whose units are all gone, but one that units are moving to.
		rows, err := tx.QueryContext(ctx, `DELETE FROM accounts WHERE moving_to <> ''
AND NOT EXISTS (SELECT 1 FROM work WHERE work.account = accounts.name)
RETURNING name, moving_to, COALESCE((SELECT created_at FROM accounts t WHERE t.name = accounts.moving_to), 0)`)
		if err != nil {
			return err
		}
		var ended []store.AccountDeletion
		for rows.Next() {
			d := store.AccountDeletion{Resumed: true}
			var at int64
			if err := rows.Scan(&d.Name, &d.Tombstone, &at); err != nil {
				rows.Close()
				return err
			}
			d.DeletedAt = fromNanos(at)
			ended = append(ended, d)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if p.AuditFinished != nil {
			for _, d := range ended {
				for _, e := range p.AuditFinished(d) {
					if _, err := insertAudit(ctx, tx, e); err != nil {
						return err
					}
				}
			}
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM accounts WHERE key_id = 0 AND created_at < ?
AND NOT EXISTS (SELECT 1 FROM work WHERE work.account = accounts.name)
AND NOT EXISTS (SELECT 1 FROM accounts moving WHERE moving.moving_to = accounts.name)`, toNanos(p.QueuedBefore))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deleting ended work queued before %s: %w", p.QueuedBefore.Format(time.RFC3339), err)
	}
	return int(n), nil
}
