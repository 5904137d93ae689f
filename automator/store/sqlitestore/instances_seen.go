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
			if _, err := tx.ExecContext(ctx, instanceUpsert(batchedNotOlder), instanceArgs(p)...); err != nil {
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
