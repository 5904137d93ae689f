package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) WorkCancel(ctx context.Context, p store.WorkCancelParams) (store.Work, error) {
	// No transaction: the conditional UPDATE is the whole write, and the read
	// after a refusal only explains it. Once sent, it runs to its end
	// (Store.sent): its caller learns whether the unit was cancelled.
	var w store.Work
	err := s.sentAgain(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		var err error
		w, err = scanWork(c.QueryRow(ctx, withAudit(`UPDATE work
SET state = 'cancelled', reason = $1, finished_at = $2
WHERE id = $3 AND state IN ('queued', 'claimed') AND deadline > $2
RETURNING `+workColumns, p.Audit != nil, 4),
			appendAuditArgs([]any{p.Reason, p.Now, p.ID}, p.Audit)...))
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		w, err = getWork(ctx, c, p.ID)
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
