package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
)

const auditColumns = `seq, at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail`

// insertAudit appends e with q (a connection, or a transaction that also
// writes what e records) and returns it with its Seq.
func insertAudit(ctx context.Context, q querier, e store.AuditEvent) (store.AuditEvent, error) {
	if e.Kind == "" {
		return store.AuditEvent{}, fmt.Errorf("appending to the audit log: the event has no kind")
	}
	err := q.QueryRow(ctx, `INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING seq, at`,
		e.At, e.Kind, e.Actor, e.Source, e.Account, e.WorkID, e.InstanceID, e.Outcome, e.SealedScript, e.Detail).Scan(&e.Seq, &e.At)
	if err != nil {
		return store.AuditEvent{}, fmt.Errorf("appending %s to the audit log: %w", e.Kind, err)
	}
	e.At = e.At.UTC()
	return e, nil
}

// appendAudit appends e, when set, in tx, the transaction of the change e
// records (an Audit of the params).
func appendAudit(ctx context.Context, tx pgx.Tx, e *store.AuditEvent) error {
	if e == nil {
		return nil
	}
	_, err := insertAudit(ctx, tx, *e)
	return err
}

func (s *Store) AuditAppend(ctx context.Context, e store.AuditEvent) (store.AuditEvent, error) {
	var out store.AuditEvent
	err := s.sent(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		var err error
		out, err = insertAudit(ctx, c, e)
		return err
	})
	return out, err
}

func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEvent, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("listing the audit log: limit %d must be positive", p.Limit)
	}
	// A filter PostgreSQL cannot take as text matches nothing, as in
	// SQLite, rather than fail the query.
	if !store.Text(p.Account) || !store.Text(p.WorkID) || slices.ContainsFunc(p.Kinds, func(k string) bool { return !store.Text(k) }) {
		return nil, nil
	}
	// The filters are each true at once when not set (a zero-length
	// array keeps every kind): one statement for every listing. An
	// account's tombstones' names begin with $7.
	kinds := p.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+auditColumns+` FROM audit
WHERE seq > $1 AND at >= $2
AND ($4::text = '' OR account = $4 OR left(account, length($7::text)) = $7)
AND ($5::text = '' OR work_id = $5)
AND (cardinality($6::text[]) = 0 OR kind = ANY($6))
ORDER BY seq
LIMIT $3`, p.AfterSeq, p.Since, p.Limit, p.Account, p.WorkID, kinds, store.DeletedAccountPrefix(p.Account))
	if err != nil {
		return nil, fmt.Errorf("listing the audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AuditEvent, error) {
		var e store.AuditEvent
		err := r.Scan(&e.Seq, &e.At, &e.Kind, &e.Actor, &e.Source, &e.Account, &e.WorkID, &e.InstanceID, &e.Outcome, &e.SealedScript, &e.Detail)
		e.At = e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing the audit log: %w", err)
	}
	return out, nil
}

// withAudit wraps a single-row UPDATE … RETURNING workColumns so that, when
// audit is true, the statement also appends an audit event for the row it
// changed (and none when it changed nothing): one statement, so one
// transaction. The event's fixed fields are parameters from first on (see
// appendAuditArgs); the unit's come from the changed row.
func withAudit(update string, audit bool, first int) string {
	if !audit {
		return update
	}
	p := func(i int) string { return "$" + strconv.Itoa(first+i) }
	return `WITH w AS (
` + update + `
), a AS (
	INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
	SELECT ` + p(0) + `, ` + p(1) + `, ` + p(2) + `, ` + p(3) + `, w.account, w.id, w.instance_id, w.state, ` + p(4) + `, ` + p(5) + ` FROM w
)
SELECT * FROM w`
}

// appendAuditArgs appends the parameters withAudit's statement takes.
func appendAuditArgs(args []any, e *store.AuditEvent) []any {
	if e == nil {
		return args
	}
	return append(args, e.At, e.Kind, e.Actor, e.Source, e.SealedScript, e.Detail)
}

// errNothingPurged undoes a purge's record when it found nothing to
// delete.
var errNothingPurged = errors.New("nothing to purge")

func (s *Store) AuditPurge(ctx context.Context, p store.AuditPurgeParams) (int, error) {
	if err := store.CheckAuditPurge(p); err != nil {
		return 0, err
	}
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		n = 0
		// By the earlier of the replica's clock and the database's: a
		// replica whose clock runs ahead deletes nothing the retention
		// keeps (and the database refuses a record within a day of its
		// clock).
		var before time.Time
		var due bool
		if err := tx.QueryRow(ctx, `WITH b AS (SELECT LEAST($1::timestamptz, now()) - $2::bigint * interval '1 microsecond' AS before)
SELECT before, EXISTS (SELECT 1 FROM audit WHERE at < before) FROM b`, p.Now, p.Retention.Microseconds()).Scan(&before, &due); err != nil || !due {
			return err
		}
		// On record before any event goes, unless a record covers it
		// already: the delete trigger refuses every event stamped at or
		// after the latest before.
		tag, err := tx.Exec(ctx, `INSERT INTO audit_purged (before, at)
SELECT $1::timestamptz, $2::timestamptz WHERE NOT EXISTS (SELECT 1 FROM audit_purged WHERE before >= $1::timestamptz)
ON CONFLICT (before) DO NOTHING`, before, p.Now)
		if err != nil {
			return err
		}
		recorded := tag.RowsAffected() == 1
		if recorded {
			e := p.Audit
			e.At, e.Detail = p.Now, store.AuditPurgedDetail(e.Detail, before)
			if _, err := insertAudit(ctx, tx, e); err != nil {
				return err
			}
		}
		// Never the newest event, as in SQLite (whose seqs would be handed
		// out again; an identity's are not, but the stores keep one rule).
		if tag, err = tx.Exec(ctx, `DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE at < $1 ORDER BY at LIMIT $2)
AND seq < (SELECT max(seq) FROM audit)`, before, p.Max); err != nil {
			return err
		}
		if n = tag.RowsAffected(); n == 0 && recorded {
			// Another replica's purge deleted them first: no record of a
			// purge that deleted nothing.
			return errNothingPurged
		}
		return nil
	})
	switch {
	case errors.Is(err, errNothingPurged):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("purging the audit log of the events older than %v: %w", p.Retention, err)
	}
	return int(n), nil
}
