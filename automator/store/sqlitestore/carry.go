package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"
)

// CarryIdempotentUnits copies into the database at path the units of the
// database at prevPath that it lacks and that were queued with an
// idempotency key at or after since: for a restore, path is the backup's
// copy and prevPath the database it replaces, where those units were
// queued after the backup was taken. Their keys stay used, so a caller's
// retry with one returns the unit it made instead of queueing its command
// again. Each unit is copied as it is, with its audit records (its
// work.queued, and its work.ended when it ended), so that no unit is in
// path without its records: a unit that was open in prevPath is copied
// open, for the caller to end (store.Store.WorkEndOpen, which records its
// end), and an ended one keeps its outcome. A unit of an account path
// lacks is not copied. A unit of path holding a key that prevPath gave to
// a newer unit loses it, as in prevPath. Both files must be closed;
// prevPath is only read, and may be of any schema version. It returns how
// many units it copied.
func CarryIdempotentUnits(ctx context.Context, path, prevPath string, since time.Time) (carried int, err error) {
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", path, err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", path, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `ATTACH DATABASE ? AS prev`, prevPath); err != nil {
		return 0, fmt.Errorf("reading %s: %w", prevPath, err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `DETACH DATABASE prev`)
	var tables int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM prev.sqlite_master WHERE type = 'table' AND name = 'work'`).Scan(&tables); err != nil {
		return 0, fmt.Errorf("reading %s: %w", prevPath, err)
	}
	if tables == 0 {
		return 0, nil // an empty database: no unit to carry
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("carrying units into %s: %w", path, err)
	}
	defer tx.Rollback()
	// The units to carry: in prev, queued with a key since, not in main,
	// of an account main has.
	// since is ?1 in every statement that selects them.
	const toCarry = `SELECT p.id FROM prev.work p
WHERE p.idempotency_key IS NOT NULL AND p.queued_at >= ?1
AND p.account IN (SELECT name FROM main.accounts)
AND NOT EXISTS (SELECT 1 FROM main.work m WHERE m.id = p.id)`
	if _, err := tx.ExecContext(ctx, `UPDATE main.work SET idempotency_key = NULL
WHERE idempotency_key IS NOT NULL AND EXISTS (SELECT 1 FROM prev.work p
	WHERE p.account = work.account AND p.idempotency_key = work.idempotency_key AND p.id IN (`+toCarry+`))`, toNanos(since)); err != nil {
		return 0, fmt.Errorf("carrying units into %s: %w", path, outOfSpace(err, filepath.Dir(path)))
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM prev.work WHERE id IN (`+toCarry+`)`,
		toNanos(since)).Scan(&carried); err != nil {
		return 0, fmt.Errorf("reading %s: %w", prevPath, err)
	}
	// Their audit records first: once the units are in main, toCarry
	// selects none. A prevPath of a schema before the audit log has none.
	var auditTables int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM prev.sqlite_master WHERE type = 'table' AND name = 'audit'`).Scan(&auditTables); err != nil {
		return 0, fmt.Errorf("reading %s: %w", prevPath, err)
	}
	if auditTables > 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO main.audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
SELECT a.at, a.kind, a.actor, a.source, a.account, a.work_id, a.instance_id, a.outcome, a.sealed_script, a.detail
FROM prev.audit a WHERE a.work_id IN (`+toCarry+`) ORDER BY a.seq`, toNanos(since)); err != nil {
			return 0, fmt.Errorf("carrying the audit records of units into %s: %w", path, outOfSpace(err, filepath.Dir(path)))
		}
	}
	// The keys they are sealed with that main lacks (a rotate-key after
	// the backup), as previous keys no proxy may use: without them the
	// units would never open, and the account's next rotation would make
	// another key under one of their ids. Both databases' keys are sealed
	// with the same master key, bound to the account's name.
	if err := carryKeys(ctx, tx, toCarry, since); err != nil {
		return 0, fmt.Errorf("carrying the keys of units into %s: %w", path, outOfSpace(err, filepath.Dir(path)))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO main.work (id, account, state, key_id, sealed_command, queued_at, deadline,
	claimed_at, instance_id, claim_id, finished_at, sealed_result, reason, idempotency_key)
SELECT p.id, p.account, p.state, p.key_id, p.sealed_command, p.queued_at, p.deadline, p.claimed_at, p.instance_id, p.claim_id,
	p.finished_at, p.sealed_result, p.reason, p.idempotency_key
FROM prev.work p WHERE p.id IN (`+toCarry+`)`, toNanos(since)); err != nil {
		return 0, fmt.Errorf("carrying units into %s: %w", path, outOfSpace(err, filepath.Dir(path)))
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("carrying units into %s: %w", path, outOfSpace(err, filepath.Dir(path)))
	}
	return carried, nil
}

// carryKeys copies from prev into main, as previous keys whose overlap has
// ended, the keys of the units toCarry selects that main has under no id
// (neither current nor previous). A key id main has already stays as it
// is.
func carryKeys(ctx context.Context, tx *sql.Tx, toCarry string, since time.Time) error {
	var keyTables int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM prev.sqlite_master WHERE type = 'table' AND name = 'account_keys'`).Scan(&keyTables); err != nil {
		return err
	}
	prevKeys := `SELECT name AS account, key_id, sealed_key FROM prev.accounts WHERE key_id <> 0`
	if keyTables > 0 {
		prevKeys += ` UNION ALL SELECT account, key_id, sealed_key FROM prev.account_keys`
	}
	now := toNanos(time.Now())
	_, err := tx.ExecContext(ctx, `INSERT INTO main.account_keys (account, key_id, sealed_key, retired_at, usable_until)
SELECT k.account, k.key_id, k.sealed_key, ?2, ?2 FROM (`+prevKeys+`) k
WHERE EXISTS (SELECT 1 FROM prev.work p WHERE p.account = k.account AND p.key_id = k.key_id AND p.id IN (`+toCarry+`))
AND NOT EXISTS (SELECT 1 FROM main.accounts a WHERE a.name = k.account AND a.key_id = k.key_id)
AND NOT EXISTS (SELECT 1 FROM main.account_keys m WHERE m.account = k.account AND m.key_id = k.key_id)
GROUP BY k.account, k.key_id`, toNanos(since), now)
	return err
}
