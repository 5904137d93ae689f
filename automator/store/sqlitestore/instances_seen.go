package sqlitestore

import (
	"context"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

// InstancesSeen writes every poll of ps in one write (so one commit, and
// with the writes waiting beside it one fsync) with one prepared upsert.
func (s *Store) InstancesSeen(ctx context.Context, ps []store.InstanceSeenParams) error {
	if len(ps) == 0 {
		return nil
	}
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		for _, p := range ps {
			// A poll of an account deleted meanwhile is left out.
			if _, err := tx.ExecContext(ctx, `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at)
SELECT ?1, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at
WHERE excluded.last_poll_at >= instances.last_poll_at`,
				p.Account, p.InstanceID, p.Hostname, p.Version, toNanos(p.Now), p.Running, stoppedAt(p)); err != nil {
				return fmt.Errorf("instance %q of account %q: %w", p.InstanceID, p.Account, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording the polls of %d instances: %w", len(ps), err)
	}
	return nil
}
