package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) WorkCancel(ctx context.Context, p store.WorkCancelParams) (store.Work, error) {
	var w store.Work
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		var err error
		w, err = scanWork(tx.QueryRowContext(ctx, `UPDATE work
SET state = 'cancelled', reason = ?, finished_at = ?
WHERE id = ? AND state IN ('queued', 'claimed') AND deadline > ?
RETURNING `+workColumns,
			p.Reason, toNanos(p.Now), p.ID, toNanos(p.Now)))
		if err == nil && p.Audit != nil {
			_, err = insertAudit(ctx, tx, p.Audit.ForWork(w))
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		w, err = getWork(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		return store.NotCancellable(w)
	})
	if err != nil {
		return w, fmt.Errorf("cancelling work %q: %w", p.ID, err)
	}
	return w, nil
}
