package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

// WorkExpire is safe with any number of replicas sweeping at once: in one
// transaction it locks the due units with FOR UPDATE SKIP LOCKED (a unit
// another sweeper, claimer or completer holds is left to that one) and
// moves each to timed_out only while it is still in the state it was read
// in, so no unit is expired twice nor after it ended otherwise.
func (s *Store) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	var limit *int // NULL: no limit
	if p.Max > 0 {
		limit = &p.Max
	}
	var expired []store.Work
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+workColumns+` FROM work
WHERE state IN ('queued', 'claimed') AND deadline <= $1
ORDER BY deadline, id
LIMIT $2
FOR UPDATE SKIP LOCKED`, p.Now, limit)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, rowTo(scanWork))
		if err != nil || len(due) == 0 {
			return err
		}
		ids := make([]string, len(due))
		states := make([]string, len(due))
		reasons := make([]string, len(due))
		for i, d := range due {
			ids[i], states[i], reasons[i] = d.ID, string(d.State), expireReason(d)
		}
		rows, err = tx.Query(ctx, `UPDATE work SET state = 'timed_out', reason = due.reason, finished_at = $1
FROM unnest($2::text[], $3::text[], $4::text[]) AS due (id, state, reason)
WHERE work.id = due.id AND work.state = due.state
RETURNING `+workColumnsOf("work"), p.Now, ids, states, reasons)
		if err != nil {
			return err
		}
		expired, err = pgx.CollectRows(rows, rowTo(scanWork))
		if err != nil || p.Audit == nil || len(expired) == 0 {
			return err
		}
		for _, w := range expired {
			if _, err := insertAudit(ctx, tx, p.Audit.ForWork(w)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expiring work due by %s: %w", p.Now.Format(time.RFC3339Nano), err)
	}
	return expired, nil
}

// expireReason says whether the unit was ever claimed and by whom: the one
// clue an operator has when a claimer died. The same words as the SQLite
// backend's.
func expireReason(w store.Work) string {
	if w.State == store.StateClaimed {
		return fmt.Sprintf("claimed by instance %s at %s, no result before the deadline",
			w.InstanceID, w.ClaimedAt.UTC().Format(time.RFC3339Nano))
	}
	return "no instance claimed it before the deadline"
}
