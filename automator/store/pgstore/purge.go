package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
)

// WorkPurge deletes the oldest ended units queued before p.QueuedBefore, up
// to p.Max in one statement. Replicas purging at once skip each other's
// rows (SKIP LOCKED) rather than wait for them.
func (s *Store) WorkPurge(ctx context.Context, p store.WorkPurgeParams) (int, error) {
	var n int64
	// Once sent, both statements run to their end (Store.sent).
	err := s.sent(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `DELETE FROM work WHERE id IN (
SELECT id FROM work
WHERE queued_at < $1 AND state IN ('succeeded', 'failed', 'timed_out', 'cancelled')
ORDER BY queued_at, id
LIMIT $2
FOR UPDATE SKIP LOCKED)`, p.QueuedBefore, max(p.Max, 1))
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		// Tombstones of deleted accounts whose units are all gone. A unit
		// another replica purges at once may hold one back until the next
		// purge.
		if _, err := c.Exec(ctx, `DELETE FROM accounts WHERE key_id = 0 AND created_at < $1
AND NOT EXISTS (SELECT 1 FROM work WHERE work.account = accounts.name)`, p.QueuedBefore); err != nil {
			return fmt.Errorf("deleting the tombstones of deleted accounts: %w", err)
		}
		return nil
	})
	if err != nil {
		return int(n), fmt.Errorf("deleting ended work queued before %s: %w", p.QueuedBefore.Format(time.RFC3339), err)
	}
	return int(n), nil
}
