package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

const auditColumns = `seq, at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail`

// insertAudit appends e with q (a write that may also write what e records)
// and returns it with its Seq (the row id, so nothing is read back).
func insertAudit(ctx context.Context, q querier, e store.AuditEvent) (store.AuditEvent, error) {
	if e.Kind == "" {
		return store.AuditEvent{}, fmt.Errorf("appending to the audit log: the event has no kind")
	}
	var sealed any // NULL when there is no script
	if e.SealedScript != nil {
		sealed = e.SealedScript
	}
	res, err := q.ExecContext(ctx, `INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		toNanos(e.At), e.Kind, e.Actor, e.Source, e.Account, e.WorkID, e.InstanceID, e.Outcome, sealed, e.Detail)
	if err == nil {
		e.Seq, err = res.LastInsertId()
	}
	if err != nil {
		return store.AuditEvent{}, fmt.Errorf("appending %s to the audit log: %w", e.Kind, err)
	}
	e.At = fromNanos(toNanos(e.At))
	return e, nil
}

// appendAudit appends e, when set, with tx, the write of the change e
// records (an Audit of the params).
func appendAudit(ctx context.Context, tx querier, e *store.AuditEvent) error {
	if e == nil {
		return nil
	}
	_, err := insertAudit(ctx, tx, *e)
	return err
}

func (s *Store) AuditAppend(ctx context.Context, e store.AuditEvent) (store.AuditEvent, error) {
	var out store.AuditEvent
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		var err error
		out, err = insertAudit(ctx, tx, e)
		return err
	})
	return out, err
}

func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEvent, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("listing the audit log: limit %d must be positive", p.Limit)
	}
	query, args := auditListQuery(p)
	rows, err := s.reads.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing the audit log: %w", err)
	}
	defer rows.Close()
	var out []store.AuditEvent
	for rows.Next() {
		var e store.AuditEvent
		var at int64
		if err := rows.Scan(&e.Seq, &at, &e.Kind, &e.Actor, &e.Source, &e.Account, &e.WorkID, &e.InstanceID, &e.Outcome, &e.SealedScript, &e.Detail); err != nil {
			return nil, fmt.Errorf("listing the audit log: %w", err)
		}
		e.At = fromNanos(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the audit log: %w", err)
	}
	return out, nil
}

// auditPageQuery reads the events after a seq (?1) from a time (?2) on,
// by seq, at most ?3 of them: the next page of a listing. The filters of
// AuditListParams go in where auditFilters says.
const auditPageQuery = `SELECT ` + auditColumns + ` FROM audit
WHERE seq > ?1 AND at >= ?2` + auditFilters + `
ORDER BY seq
LIMIT ?3`

// auditSinceQuery reads the first page of the events from a time on, with
// the parameters of auditPageQuery. SQLite plans auditPageQuery as SEARCH
// audit USING INTEGER PRIMARY KEY (rowid>?): from AfterSeq 0 it reads every
// event from the first one on to reach the last hour (seconds on a log of
// millions). This one first finds, in the index on at, the smallest seq of
// the events from Since on and reads the table from there. That min is no
// larger than the seq of any event it keeps, so none is lost even when a
// later seq carries an earlier at (the callers stamp at before the write
// queue), and at >= ?2 still decides which events are kept: the same
// events, in the same order, as auditPageQuery. No event from Since on: the
// min is NULL, and so is the answer (one statement, one snapshot). INDEXED
// BY is needed: without it SQLite computes the min with the same walk of
// the rowids from the first, stopping at the first match. The min costs a
// walk of the index entries from Since on (a millisecond for an hour of
// events, a quarter of a second for 60 days of 3 M events), so only the
// first page pays it: each next page starts after the last seq of the
// previous one, already past the start.
const auditSinceQuery = `SELECT ` + auditColumns + ` FROM audit
WHERE seq >= (SELECT min(seq) FROM audit INDEXED BY audit_at WHERE at >= ?2) AND at >= ?2` + auditFilters + `
ORDER BY seq
LIMIT ?3`

// auditFilters keeps the events of an account (?4, or a name beginning with
// ?7, its tombstones'), of a unit (?5) and of some kinds (?6, a JSON array),
// each only when set: one statement for every listing, whose plan stays
// the walk by seq above (store.AuditListParams says why no index holds
// these columns).
const auditFilters = `
AND (?4 = '' OR account = ?4 OR substr(account, 1, length(?7)) = ?7)
AND (?5 = '' OR work_id = ?5)
AND (?6 = '' OR kind IN (SELECT value FROM json_each(?6)))`

// auditListQuery returns the statement AuditList runs for p, with its
// arguments (the same for both statements).
func auditListQuery(p store.AuditListParams) (string, []any) {
	kinds := ""
	if len(p.Kinds) > 0 {
		b, _ := json.Marshal(p.Kinds) // strings: cannot fail
		kinds = string(b)
	}
	args := []any{p.AfterSeq, toNanos(p.Since), p.Limit, p.Account, p.WorkID, kinds, store.DeletedAccountPrefix(p.Account)}
	if p.AfterSeq <= 0 && !p.Since.IsZero() {
		args[0] = 0
		return auditSinceQuery, args
	}
	return auditPageQuery, args
}

// auditPurgeQuery deletes the ?2 oldest events stamped before ?1, found in
// audit_at, never the newest event (whose seq SQLite would hand out again).
const auditPurgeQuery = `DELETE FROM audit WHERE seq IN (
SELECT seq FROM audit INDEXED BY audit_at WHERE at < ?1 ORDER BY at LIMIT ?2)
AND seq < (SELECT max(seq) FROM audit)`

// errNothingPurged undoes a purge's record when it found nothing to
// delete.
var errNothingPurged = errors.New("nothing to purge")

func (s *Store) AuditPurge(ctx context.Context, p store.AuditPurgeParams) (int, error) {
	if err := store.CheckAuditPurge(p); err != nil {
		return 0, err
	}
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		n = 0
		// The newest event's stamp stands for now when it is earlier
		// than the automator's clock: a clock stepped ahead deletes
		// nothing the retention keeps until it has stamped events of its
		// own, the purges' left out (and the database refuses a record
		// within a day of that event). SQLite has no clock of its own.
		var newest sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max(at) FROM audit WHERE kind <> 'audit.purged'`).Scan(&newest); err != nil || !newest.Valid {
			return err
		}
		before := min(toNanos(p.Now), newest.Int64) - int64(p.Retention)
		// On record before any event goes, unless a record covers it
		// already: the delete trigger refuses every event stamped at or
		// after the latest before.
		var due, covered bool
		if err := tx.QueryRowContext(ctx, `SELECT
	EXISTS (SELECT 1 FROM audit INDEXED BY audit_at WHERE at < ?1),
	EXISTS (SELECT 1 FROM audit_purged WHERE before >= ?1)`, before).Scan(&due, &covered); err != nil || !due {
			return err
		}
		if !covered {
			if _, err := tx.ExecContext(ctx, `INSERT INTO audit_purged (before, at) VALUES (?, ?)`, before, toNanos(p.Now)); err != nil {
				return err
			}
			e := p.Audit
			e.At, e.Detail = p.Now, store.AuditPurgedDetail(e.Detail, fromNanos(before))
			if _, err := insertAudit(ctx, tx, e); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, auditPurgeQuery, before, p.Max)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err == nil && n == 0 && !covered {
			return errNothingPurged // the newest event alone was due: no record of a purge that deleted nothing
		}
		return err
	})
	switch {
	case errors.Is(err, errNothingPurged):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("purging the audit log of the events older than %v: %w", p.Retention, err)
	}
	return int(n), nil
}
