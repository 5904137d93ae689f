package sqlitestore

import (
	"context"
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
	rows, err := s.reads.QueryContext(ctx, `SELECT `+auditColumns+` FROM audit
WHERE seq > ? AND at >= ?
ORDER BY seq
LIMIT ?`, p.AfterSeq, toNanos(p.Since), p.Limit)
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
