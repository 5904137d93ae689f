package sqlitestore

import (
	"context"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

// InstancesSeen writes every poll of ps in one write (so one commit, and
// with the writes waiting beside it one fsync) with one prepared update,
// and looks for the record of an instance whose poll changed nothing.
func (s *Store) InstancesSeen(ctx context.Context, ps []store.InstanceSeenParams) ([]store.InstanceSeenParams, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	var unrecorded []store.InstanceSeenParams
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		unrecorded = unrecorded[:0]
		for _, p := range ps {
			// A poll of an account deleted meanwhile is left out.
			res, err := tx.ExecContext(ctx, instanceBatchUpdate, instanceArgs(p)...)
			if err != nil {
				return fmt.Errorf("instance %q of account %q: %w", p.InstanceID, p.Account, err)
			}
			if n, err := res.RowsAffected(); err != nil || n != 0 {
				continue
			}
			// Not newer than its record, or without one.
			var none bool
			if err := tx.QueryRowContext(ctx, instanceUnrecorded, p.Account, p.InstanceID, toNanos(p.AccountCreatedAt)).Scan(&none); err != nil {
				return fmt.Errorf("instance %q of account %q: %w", p.InstanceID, p.Account, err)
			}
			if none {
				unrecorded = append(unrecorded, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recording the polls of %d instances: %w", len(ps), err)
	}
	return unrecorded, nil
}
