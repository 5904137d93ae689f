package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

// WorkEndOpen locks the open units with FOR UPDATE (waiting for a claimer
// or completer that holds one, so none is skipped) and moves each to
// timed_out only while it is still in the state it was read in.
func (s *Store) WorkEndOpen(ctx context.Context, p store.WorkEndOpenParams) ([]store.Work, error) {
	var limit *int // NULL: no limit
	if p.Max > 0 {
		limit = &p.Max
	}
	var ended []store.Work
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+workColumnsWithoutSealed+` FROM work
WHERE state IN ('queued', 'claimed')
ORDER BY queued_at, id
LIMIT $1
FOR UPDATE`, limit)
		if err != nil {
			return err
		}
		open, err := pgx.CollectRows(rows, rowTo(scanWork))
		if err != nil || len(open) == 0 {
			return err
		}
		ended, err = timeOut(ctx, tx, p.Now, open, func(o store.Work) string { return store.EndOpenReason(p.Reason, o) }, p.Audit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ending the open units: %w", err)
	}
	return ended, nil
}
