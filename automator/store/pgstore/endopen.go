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
		rows, err := tx.Query(ctx, `SELECT `+workColumns+` FROM work
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
		ids := make([]string, len(open))
		states := make([]string, len(open))
		reasons := make([]string, len(open))
		for i, o := range open {
			ids[i], states[i], reasons[i] = o.ID, string(o.State), store.EndOpenReason(p.Reason, o)
		}
		rows, err = tx.Query(ctx, `UPDATE work SET state = 'timed_out', reason = open.reason, finished_at = $1
FROM unnest($2::text[], $3::text[], $4::text[]) AS open (id, state, reason)
WHERE work.id = open.id AND work.state = open.state
RETURNING `+workColumnsOf("work"), p.Now, ids, states, reasons)
		if err != nil {
			return err
		}
		ended, err = pgx.CollectRows(rows, rowTo(scanWork))
		if err != nil || p.Audit == nil {
			return err
		}
		for _, w := range ended {
			if _, err := insertAudit(ctx, tx, p.Audit.ForWork(w)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ending the open units: %w", err)
	}
	return ended, nil
}
