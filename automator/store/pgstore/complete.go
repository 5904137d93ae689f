package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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
	// The conditional UPDATE is the whole write (with its audit event, one
	// statement, which may share a transaction with other writes: see
	// group.go), and the read after a refusal only explains it. $7 is the
	// account the claimer authenticated as, or ''.
	var w store.Work
	err := func() error {
		err := s.write(ctx, withAudit(`UPDATE work
SET state = $1, sealed_result = $2, reason = $3, finished_at = $4
WHERE id = $5 AND state = 'claimed' AND claim_id = $6 AND deadline > $4 AND ($7 = '' OR account = $7)
RETURNING `+workColumns, p.Audit != nil, 8),
			appendAuditArgs([]any{string(p.State), p.SealedResult, p.Reason, p.Now, p.ID, p.ClaimID, p.Account}, p.Audit),
			scanInto(&w))
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Nothing changed: read the unit to say precisely why.
		w, err = getWork(ctx, s.pool, p.ID)
		if err != nil {
			return err
		}
		if p.Account != "" && w.Account != p.Account {
			// Another account's unit: as if there were none, and nothing of
			// it is returned.
			w = store.Work{}
			return store.ErrNotFound
		}
		return store.NotCompletable(w, p.ClaimID)
	}()
	if err != nil {
		return w, fmt.Errorf("completing work %q: %w", p.ID, err)
	}
	return w, nil
}
