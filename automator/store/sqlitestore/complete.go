package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

// WorkComplete records the claimer's outcome. On ErrClaimMismatch and
// ErrNotClaimable it also returns the unit as it stands, so the caller can
// say why the result was refused.
func (s *Store) WorkComplete(ctx context.Context, p store.WorkCompleteParams) (store.Work, error) {
	switch p.State {
	case store.StateSucceeded, store.StateFailed, store.StateCancelled:
	default:
		return store.Work{}, fmt.Errorf("completing work %q: %q is not an outcome a claimer reports (succeeded, failed or cancelled)", p.ID, p.State)
	}
	now := toNanos(p.Now)
	var w store.Work
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		var err error
		w, err = scanWork(tx.QueryRowContext(ctx, `UPDATE work
SET state = ?, sealed_result = ?, reason = ?, finished_at = ?
WHERE id = ? AND state = 'claimed' AND claim_id = ? AND deadline > ? AND (? = '' OR account = ?)
RETURNING `+workColumns,
			string(p.State), p.SealedResult, p.Reason, now, p.ID, p.ClaimID, now, p.Account, p.Account))
		if err == nil && p.Audit != nil {
			_, err = insertAudit(ctx, tx, p.Audit.ForWork(w))
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Nothing changed: read the unit to say precisely why.
		w, err = getWork(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		if p.Account != "" && w.Account != p.Account {
			w = store.Work{}
			return store.ErrNotFound
		}
		return store.NotCompletable(w, p.ClaimID)
	})
	if err != nil {
		return w, fmt.Errorf("completing work %q: %w", p.ID, err)
	}
	return w, nil
}
