package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// migration is one step of the schema. Steps are applied in order, each once;
// a released step is never edited, a change is a new step.
type migration struct {
	version int
	name    string
	sql     string
}

var migrations = []migration{
	{version: 1, name: "accounts, work, instances, api keys", sql: `
CREATE TABLE accounts (
	name       TEXT    PRIMARY KEY,
	token_hash BLOB    NOT NULL UNIQUE,
	key_id     INTEGER NOT NULL,
	sealed_key BLOB    NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE work (
	id             TEXT    PRIMARY KEY,
	account        TEXT    NOT NULL REFERENCES accounts (name),
	state          TEXT    NOT NULL CHECK (state IN ('queued', 'claimed', 'succeeded', 'failed', 'timed_out', 'cancelled')),
	key_id         INTEGER NOT NULL,
	sealed_command BLOB    NOT NULL,
	queued_at      INTEGER NOT NULL,
	deadline       INTEGER NOT NULL,
	claimed_at     INTEGER NOT NULL DEFAULT 0,
	instance_id    TEXT    NOT NULL DEFAULT '',
	claim_id       TEXT    NOT NULL DEFAULT '',
	finished_at    INTEGER NOT NULL DEFAULT 0,
	sealed_result  BLOB,
	reason         TEXT    NOT NULL DEFAULT '',
	idempotency_key TEXT
) STRICT;

-- Idempotent submits: one unit per account and key (NULL: no key).
CREATE UNIQUE INDEX work_account_idempotency_key ON work (account, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- WorkClaim: an account's queued units, oldest first.
CREATE INDEX work_account_state_queued_at ON work (account, state, queued_at);
-- WorkExpire and WorkNextDeadline: open units by deadline.
CREATE INDEX work_state_deadline ON work (state, deadline);

CREATE TABLE instances (
	account      TEXT    NOT NULL REFERENCES accounts (name),
	instance_id  TEXT    NOT NULL,
	hostname     TEXT    NOT NULL,
	version      TEXT    NOT NULL,
	last_poll_at INTEGER NOT NULL,
	in_flight    INTEGER NOT NULL,
	PRIMARY KEY (account, instance_id)
) STRICT;

CREATE TABLE api_keys (
	id         TEXT    PRIMARY KEY,
	hash       BLOB    NOT NULL UNIQUE,
	name       TEXT    NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
`},
	{version: 2, name: "replicas", sql: `
CREATE TABLE replicas (
	replica_id TEXT    PRIMARY KEY,
	hostname   TEXT    NOT NULL,
	version    TEXT    NOT NULL,
	started_at INTEGER NOT NULL,
	last_seen  INTEGER NOT NULL
) STRICT;
`},
	{version: 3, name: "previous tokens and keys, api key scopes and revocation, audit log", sql: `
-- Tokens replaced by a rotation, each valid until the end of its overlap
-- window. Like the current token, only its SHA-256 is stored.
CREATE TABLE account_tokens (
	token_hash  BLOB    PRIMARY KEY,
	account     TEXT    NOT NULL REFERENCES accounts (name),
	valid_until INTEGER NOT NULL
) STRICT;
CREATE INDEX account_tokens_account ON account_tokens (account);

-- Keys replaced by a rotation (the current key stays in accounts), sealed
-- with the master key like it. They open the units sealed with them.
CREATE TABLE account_keys (
	account      TEXT    NOT NULL REFERENCES accounts (name),
	key_id       INTEGER NOT NULL,
	sealed_key   BLOB    NOT NULL,
	retired_at   INTEGER NOT NULL,
	usable_until INTEGER NOT NULL,
	PRIMARY KEY (account, key_id)
) STRICT;

-- accounts: a JSON array of account names, '' for every account.
ALTER TABLE api_keys ADD COLUMN accounts TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN revoked_at INTEGER NOT NULL DEFAULT 0;

-- The audit log: who did what, from where, when. Never a secret, argument,
-- stdin, env or output; the script name is sealed with the master key.
CREATE TABLE audit (
	seq           INTEGER PRIMARY KEY AUTOINCREMENT,
	at            INTEGER NOT NULL,
	kind          TEXT    NOT NULL,
	actor         TEXT    NOT NULL DEFAULT '',
	source        TEXT    NOT NULL DEFAULT '',
	account       TEXT    NOT NULL DEFAULT '',
	work_id       TEXT    NOT NULL DEFAULT '',
	instance_id   TEXT    NOT NULL DEFAULT '',
	outcome       TEXT    NOT NULL DEFAULT '',
	sealed_script BLOB,
	detail        TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX audit_at ON audit (at);

-- Append-only: rows are never changed nor removed.
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
`},
	{version: 4, name: "work listings", sql: `
-- WorkList: units newest first, of every account or of one (with a state
-- too, work_account_state_queued_at serves). Their keys never change, so a
-- claim or a result does not touch them.
CREATE INDEX work_queued_at_id ON work (queued_at, id);
CREATE INDEX work_account_queued_at_id ON work (account, queued_at, id);
`},
	{version: 5, name: "claim and deadline indexes of open units only", sql: `
-- Units are never deleted, so nearly every row is finished, and an index
-- entry of a finished unit was pure cost: every claim and completion moved
-- the unit's entries in both indexes to another state, and each commit wrote
-- the leaf pages of every account's finished range to the WAL. These hold
-- only the open units (as in pgstore): small, and a completion only removes
-- entries. A listing by a finished state uses work_account_queued_at_id or
-- work_queued_at_id and filters.
DROP INDEX work_account_state_queued_at;
DROP INDEX work_state_deadline;
-- WorkClaim, WorkQueuedCount, AccountStats: an account's queued units,
-- oldest first.
CREATE INDEX work_queued ON work (account, queued_at, id) WHERE state = 'queued';
-- AccountStats and WorkList: an account's units in flight, oldest first.
CREATE INDEX work_claimed ON work (account, queued_at, id) WHERE state = 'claimed';
-- WorkExpire and WorkNextDeadline: open units by deadline.
CREATE INDEX work_open_deadline ON work (deadline, id) WHERE state IN ('queued', 'claimed');
`},
	{version: 6, name: "audit without AUTOINCREMENT", sql: `
-- AUTOINCREMENT made every audit insert also read and rewrite the table's
-- row in sqlite_sequence, two of them per unit. It only guards against
-- reusing the number of a deleted row, and no audit row is ever deleted
-- (the triggers refuse it), so the largest seq only grows and a plain
-- INTEGER PRIMARY KEY numbers the same way. The table is rebuilt with its
-- rows, seqs, index and triggers. (DROP TABLE fires no DELETE trigger.)
CREATE TABLE audit_new (
	seq           INTEGER PRIMARY KEY,
	at            INTEGER NOT NULL,
	kind          TEXT    NOT NULL,
	actor         TEXT    NOT NULL DEFAULT '',
	source        TEXT    NOT NULL DEFAULT '',
	account       TEXT    NOT NULL DEFAULT '',
	work_id       TEXT    NOT NULL DEFAULT '',
	instance_id   TEXT    NOT NULL DEFAULT '',
	outcome       TEXT    NOT NULL DEFAULT '',
	sealed_script BLOB,
	detail        TEXT    NOT NULL DEFAULT ''
) STRICT;
INSERT INTO audit_new SELECT seq, at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail FROM audit;
DROP TABLE audit;
ALTER TABLE audit_new RENAME TO audit;
CREATE INDEX audit_at ON audit (at);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
`},
	{version: 7, name: "dashboard sign-outs", sql: `
-- Dashboard sessions signed out of, by the random id their cookie carries:
-- every replica refuses such a cookie although its signature holds. A row
-- is needed until the session would have expired anyway (expires_at),
-- then purged.
CREATE TABLE dashboard_sessions_ended (
	id         TEXT    PRIMARY KEY,
	expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX dashboard_sessions_ended_expires_at ON dashboard_sessions_ended (expires_at);
`},
	{version: 8, name: "the poll each claim was made for", sql: `
-- The proxy process (its run id) and the poll of that run (its number) a
-- unit was claimed for: a proxy that says it never read that poll's answer
-- has the unit ended at once (WorkClaimedByPolls). Found through
-- work_claimed, an account's claimed units.
ALTER TABLE work ADD COLUMN claim_run TEXT NOT NULL DEFAULT '';
ALTER TABLE work ADD COLUMN claim_poll INTEGER NOT NULL DEFAULT 0;
`},
	{version: 9, name: "accounts being deleted", sql: `
-- The tombstone a deleted account's units are moving to, while
-- AccountDelete moves them in batches (its row has key_id 0 meanwhile);
-- '' for every other account.
ALTER TABLE accounts ADD COLUMN moving_to TEXT NOT NULL DEFAULT '';
`},
	{version: 10, name: "listing indexes of the units that ended without success", sql: `
-- WorkList by failed, timed_out or cancelled, of one account or of every
-- account: newest first in that state. Those units are usually few among
-- the succeeded, and walking work_account_queued_at_id or work_queued_at_id
-- for them read every unit of the table, or of the account, to list a
-- handful. A succeeded unit has no entry: a completion to succeeded writes
-- neither index. The predicate is ORed equalities, not IN: SQLite uses a
-- partial index only for a statement whose WHERE implies its WHERE, and
-- proves "state = 'failed'" implies a term of an OR, not an IN.
CREATE INDEX work_unsuccessful ON work (state, queued_at, id)
	WHERE state = 'failed' OR state = 'timed_out' OR state = 'cancelled';
CREATE INDEX work_account_unsuccessful ON work (account, state, queued_at, id)
	WHERE state = 'failed' OR state = 'timed_out' OR state = 'cancelled';
`},
	{version: 11, name: "instances that said they were stopping", sql: `
-- The time of the poll in which an instance said it was stopping
-- (PollRequest.stopping), 0 when its latest poll did not. The instance is
-- stopped while it is at least last_poll_at: a later poll recorded by an
-- automator predating the column moves last_poll_at past it.
ALTER TABLE instances ADD COLUMN stopped_at INTEGER NOT NULL DEFAULT 0;
`},
	{version: 12, name: "the run and number of an instance's poll", sql: `
-- The run id and poll_seq of the poll recorded (PollRequest.run_id,
-- poll_seq; '' and 0 when it had none). A poll of that run numbered before
-- it is older and changes nothing, however late it is written: a poll on
-- its way when the process polled again to say it stops does not end the
-- stop. An automator predating the columns leaves them as they were.
ALTER TABLE instances ADD COLUMN poll_run TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN poll_seq INTEGER NOT NULL DEFAULT 0;
`},
	{version: 13, name: "instances whose polls are refused for want of a usable key", sql: `
-- The time of the poll refused because the instance held no usable key of
-- its account (a profile of before a key rotation), 0 when its latest poll
-- was not refused, and the key ids that poll listed ("1,2"). The instance
-- is refused while refused_at is at least last_poll_at: a later poll
-- recorded by an automator predating the columns moves last_poll_at past
-- it.
ALTER TABLE instances ADD COLUMN refused_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN refused_key_ids TEXT NOT NULL DEFAULT '';
`},
	{version: 14, name: "instances whose polls are refused for an expired account token", sql: `
-- Why the refused poll recorded (refused_at) was refused: 'token_expired'
-- for a poll that presented the account's token of before a rotation whose
-- overlap window had ended (a proxy still running the whole profile of
-- before a key rotation; refused_key_ids is then ''), '' for one refused
-- for want of a usable key or not refused. An automator predating the
-- column leaves it as it was, records no poll refused for its token, and
-- writes the key ids of a poll it refuses for want of a usable key, which
-- say the cause then.
ALTER TABLE instances ADD COLUMN refused_cause TEXT NOT NULL DEFAULT '';
`},
	{version: 15, name: "audit events deleted past audit_retention", sql: `
-- The audit log's old events may be deleted past audit_retention, and only
-- those: a purge first records here the time before which it deletes the
-- events (with an audit.purged event, stamped later, in the same
-- transaction), and the log's delete trigger refuses any event stamped at
-- or after the latest recorded. A record must be a day older than the
-- newest event at least, the purges' own left out (a clock stepped ahead
-- may not make one that reaches today's events), and the newest event is
-- never deleted: with
-- seq an INTEGER PRIMARY KEY, SQLite would hand its seq out again. So the
-- log stays append-only but for its old events, whose deletion is itself
-- on record. Rows here are never changed nor removed.
CREATE TABLE audit_purged (
	before INTEGER PRIMARY KEY,
	at     INTEGER NOT NULL
) STRICT;
CREATE TRIGGER audit_purged_keeps_a_day BEFORE INSERT ON audit_purged
WHEN NEW.before > (SELECT COALESCE(MAX(at), 0) FROM audit WHERE kind <> 'audit.purged') - 86400000000000
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only but for a purge, which keeps at least its last day of events'); END;
CREATE TRIGGER audit_purged_no_update BEFORE UPDATE ON audit_purged
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_purged_no_delete BEFORE DELETE ON audit_purged
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
DROP TRIGGER audit_no_delete;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
WHEN OLD.at >= (SELECT COALESCE(MAX(before), 0) FROM audit_purged) OR OLD.seq = (SELECT MAX(seq) FROM audit)
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: only events stamped before a recorded purge are deleted, and never the newest'); END;
`},
	{version: 16, name: "audit events and purge records never replaced", sql: `
-- INSERT OR REPLACE (REPLACE, an UPSERT's insert) of a row whose key is
-- taken deletes that row without firing its DELETE trigger (unless
-- recursive_triggers is on), so it rewrote an audit event or a purge's
-- record past the triggers above. An insert that names a taken key is
-- refused before it. The automator's inserts name none (NEW.seq is -1
-- there): the probe finds nothing, at one lookup by key.
CREATE TRIGGER audit_no_replace BEFORE INSERT ON audit
WHEN EXISTS (SELECT 1 FROM audit WHERE seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_purged_no_replace BEFORE INSERT ON audit_purged
WHEN EXISTS (SELECT 1 FROM audit_purged WHERE before = NEW.before)
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
`},
}

// migrate applies the migrations not yet recorded in schema_migrations, all
// in one IMMEDIATE transaction, so a crash leaves the schema at the old
// version or the new one, never between. It refuses a database whose schema
// is newer than this binary knows, and one that holds tables but not an
// automator's schema (refuseOtherPrograms).
func migrate(ctx context.Context, db *sql.DB) error {
	return migrateWith(ctx, db, migrations)
}

// migrateWith is migrate with the given steps (a prefix of migrations, for a
// test that needs a database of an older schema).
func migrateWith(ctx context.Context, db *sql.DB, steps []migration) error {
	latest := steps[len(steps)-1].version
	current, keys, known := schemaState(ctx, db)
	if known && current > latest {
		// Said without waiting for a write lock: another program
		// holding one made this "database is locked" after 5 s (a
		// review).
		return newerSchema(current, latest)
	}
	if known && current == latest && keys {
		// Nothing to write. Whether this user may write the files is
		// still found out here, where the error names why (the migration
		// below does): but another program holding the database locked
		// is not waited for, so that the commands that only read work
		// then (a review: each said "migrating schema: database is
		// locked" after 5 s). Writes wait for it as they do anyway.
		err := writableNow(ctx, db)
		if err == nil || store.IsLocked(err) {
			return nil
		}
		if isReadOnly(err) {
			// Nor would the migration below write: said, for serve to
			// refuse it (Store.Unwritable), while the commands that
			// only read go on.
			return &readOnlyError{err}
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrating schema: %w", err)
	}
	defer tx.Rollback()

	if err := refuseOtherPrograms(ctx, tx); err != nil {
		return fmt.Errorf("migrating schema: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	applied_at INTEGER NOT NULL
)`); err != nil {
		return fmt.Errorf("migrating schema: creating schema_migrations: %w", err)
	}

	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrating schema: reading the version: %w", err)
	}
	if current > latest {
		return newerSchema(current, latest)
	}

	for _, m := range steps {
		if m.version <= current {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migrating schema to version %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
			m.version, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("migrating schema to version %d (%s): recording it: %w", m.version, m.name, err)
		}
	}
	if err := addIdempotencyKeys(ctx, tx); err != nil {
		return fmt.Errorf("migrating schema: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrating schema: %w", err)
	}
	return nil
}

// readOnlyError is migrateWith's error for a database whose schema is
// current, which this process may not write (SQLITE_READONLY, wrapped).
type readOnlyError struct{ err error }

func (e *readOnlyError) Error() string { return e.err.Error() }
func (e *readOnlyError) Unwrap() error { return e.err }

// newerSchema is the error for a database at schema version current, newer
// than latest, the last this binary knows.
func newerSchema(current, latest int) error {
	return fmt.Errorf("migrating schema: the database is at version %d, newer than this binary knows (%d); run a newer automator", current, latest)
}

// schemaState reads, without a write transaction, the database's schema
// version, and whether its work table has the idempotency keys (which
// migrateWith adds where the first releases' version 1 lacked them);
// known is false when it cannot (no schema yet, a read that failed).
func schemaState(ctx context.Context, db *sql.DB) (current int, keys, known bool) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT (SELECT COALESCE(MAX(version), 0) FROM schema_migrations),
	(SELECT COALESCE(SUM(name = 'idempotency_key'), 0) FROM pragma_table_info('work'))`).Scan(&current, &n)
	return current, n > 0, err == nil
}

// writableNow begins a write transaction on db without waiting for a lock
// another connection holds (busy_timeout 0 meanwhile), writes a row as it
// was, and rolls back: an error that store.IsLocked reports means the
// files are writable, only busy. The write is what finds a database file
// this user may not write: in WAL mode BEGIN IMMEDIATE takes its lock in
// the -shm file, and succeeds.
func writableNow(ctx context.Context, db *sql.DB) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return err
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf(`PRAGMA busy_timeout = %d`, busyTimeoutMillis)); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, `UPDATE schema_migrations SET applied_at = applied_at WHERE version = (SELECT MAX(version) FROM schema_migrations)`)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`); err == nil {
		err = rerr
	}
	return err
}

// addIdempotencyKeys adds the work table's idempotency_key column and its
// unique index where they are missing. Version 1 was edited in place to
// add them just after the first releases (2026-11-29), so a database those
// made is at version 1, or at a later version once migrated, without them,
// and every enqueue, listing and expiry on it failed ("no such column:
// idempotency_key"). Units written before have no key, as then.
func addIdempotencyKeys(ctx context.Context, tx *sql.Tx) error {
	var columns, keys int
	if err := tx.QueryRowContext(ctx, `SELECT count(*), COALESCE(SUM(name = 'idempotency_key'), 0) FROM pragma_table_info('work')`).Scan(&columns, &keys); err != nil {
		return fmt.Errorf("reading the columns of work: %w", err)
	}
	if columns == 0 || keys > 0 { // no work table yet (a test's empty prefix), or it has them
		return nil
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE work ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX work_account_idempotency_key ON work (account, idempotency_key) WHERE idempotency_key IS NOT NULL;`); err != nil {
		return fmt.Errorf("adding the idempotency keys the first releases' version 1 lacked: %w", err)
	}
	return nil
}
