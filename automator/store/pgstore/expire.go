package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
)

// WorkExpire is safe with any number of replicas sweeping at once, and
// holds no lock across a round trip: a replica that hangs in the middle of
// its sweep (stopped, frozen, cut off from PostgreSQL) keeps no unit from
// the others' sweepers. It reads the due units without locking them, then
// times them out in one statement, each only while it is still in the state
// it was read in (so no unit is expired twice nor after it ended
// otherwise; a unit claimed meanwhile is left to the next sweep), with its
// audit record. PostgreSQL runs and commits that statement whether or not
// the replica is still there to read the answer.
func (s *Store) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	var limit *int // NULL: no limit
	if p.Max > 0 {
		limit = &p.Max
	}
	fail := func(err error) ([]store.Work, error) {
		return nil, fmt.Errorf("expiring work due by %s: %w", p.Now.Format(time.RFC3339Nano), err)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+workColumns+` FROM work
WHERE state IN ('queued', 'claimed') AND deadline <= $1
ORDER BY deadline, id
LIMIT $2`, p.Now, limit)
	if err != nil {
		return fail(err)
	}
	due, err := pgx.CollectRows(rows, rowTo(scanWork))
	if err != nil || len(due) == 0 {
		if err != nil {
			return fail(err)
		}
		return nil, nil
	}
	ids := make([]string, len(due))
	states := make([]string, len(due))
	reasons := make([]string, len(due))
	for i, d := range due {
		ids[i], states[i], reasons[i] = d.ID, string(d.State), expireReason(d)
	}
	var audit store.AuditEvent
	if p.Audit != nil {
		if p.Audit.Kind == "" {
			return fail(fmt.Errorf("appending to the audit log: the event has no kind"))
		}
		audit = *p.Audit
	}
	var expired []store.Work
	err = s.sent(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		rows, err := c.Query(ctx, `WITH done AS (
	UPDATE work SET state = 'timed_out', reason = due.reason, finished_at = $1
	FROM unnest($2::text[], $3::text[], $4::text[]) AS due (id, state, reason)
	WHERE work.id = due.id AND work.state = due.state
	RETURNING `+workColumnsOf("work")+`
), audited AS (
	INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
	SELECT $6, $7, $8, $9, done.account, done.id, COALESCE(done.instance_id, ''), done.state, $10, $11
	FROM done WHERE $5
)
SELECT * FROM done`, p.Now, ids, states, reasons, p.Audit != nil,
			audit.At, audit.Kind, audit.Actor, audit.Source, audit.SealedScript, audit.Detail)
		if err != nil {
			return err
		}
		expired, err = pgx.CollectRows(rows, rowTo(scanWork))
		return err
	})
	if err != nil {
		return fail(err)
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
