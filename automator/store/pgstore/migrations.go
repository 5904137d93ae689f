package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migration is one step of the schema. Steps are applied in order, each once;
// a released step is never edited, a change is a new step.
type migration struct {
	version int
	name    string
	sql     string
}

var migrations = []migration{
	{version: 1, name: "accounts, work, instances, api keys, replicas", sql: `
-- Names and ids compare byte by byte (COLLATE "C"), as in SQLite, whatever
-- the database's locale: listings order the same on both backends.
CREATE TABLE accounts (
	name       text        COLLATE "C" PRIMARY KEY,
	token_hash bytea       NOT NULL UNIQUE,
	key_id     bigint      NOT NULL CHECK (key_id BETWEEN 0 AND 4294967295),
	sealed_key bytea       NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE TABLE work (
	id              text        COLLATE "C" PRIMARY KEY,
	account         text        COLLATE "C" NOT NULL REFERENCES accounts (name),
	state           text        NOT NULL CHECK (state IN ('queued', 'claimed', 'succeeded', 'failed', 'timed_out', 'cancelled')),
	key_id          bigint      NOT NULL CHECK (key_id BETWEEN 0 AND 4294967295),
	sealed_command  bytea       NOT NULL,
	queued_at       timestamptz NOT NULL,
	deadline        timestamptz NOT NULL,
	claimed_at      timestamptz,
	instance_id     text        NOT NULL DEFAULT '',
	claim_id        text        NOT NULL DEFAULT '',
	finished_at     timestamptz,
	sealed_result   bytea,
	reason          text        NOT NULL DEFAULT '',
	idempotency_key text
);

-- Idempotent submits: one unit per account and key (NULL: no key), across
-- every replica.
CREATE UNIQUE INDEX work_account_idempotency_key ON work (account, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- WorkClaim: an account's queued units, oldest first.
CREATE INDEX work_queued ON work (account, queued_at, id) WHERE state = 'queued';
-- WorkExpire and WorkNextDeadline: open units by deadline.
CREATE INDEX work_open_deadline ON work (deadline, id) WHERE state IN ('queued', 'claimed');
-- Listen's catch-up after a lost connection: units that ended since.
CREATE INDEX work_finished_at ON work (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE instances (
	account      text        COLLATE "C" NOT NULL REFERENCES accounts (name),
	instance_id  text        COLLATE "C" NOT NULL,
	hostname     text        NOT NULL,
	version      text        NOT NULL,
	last_poll_at timestamptz NOT NULL,
	in_flight    integer     NOT NULL,
	PRIMARY KEY (account, instance_id)
);

CREATE TABLE api_keys (
	id         text        PRIMARY KEY,
	hash       bytea       NOT NULL UNIQUE,
	name       text        NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE TABLE replicas (
	replica_id text        COLLATE "C" PRIMARY KEY,
	hostname   text        NOT NULL,
	version    text        NOT NULL,
	started_at timestamptz NOT NULL,
	last_seen  timestamptz NOT NULL
);
`},
	{version: 2, name: "previous tokens and keys, api key scopes and revocation, audit log", sql: `
-- Tokens replaced by a rotation, each valid until the end of its overlap
-- window. Like the current token, only its SHA-256 is stored.
CREATE TABLE account_tokens (
	token_hash  bytea       PRIMARY KEY,
	account     text        COLLATE "C" NOT NULL REFERENCES accounts (name),
	valid_until timestamptz NOT NULL
);
CREATE INDEX account_tokens_account ON account_tokens (account);

-- Keys replaced by a rotation (the current key stays in accounts), sealed
-- with the master key like it. They open the units sealed with them.
CREATE TABLE account_keys (
	account      text        COLLATE "C" NOT NULL REFERENCES accounts (name),
	key_id       bigint      NOT NULL CHECK (key_id BETWEEN 1 AND 4294967295),
	sealed_key   bytea       NOT NULL,
	retired_at   timestamptz NOT NULL,
	usable_until timestamptz NOT NULL,
	PRIMARY KEY (account, key_id)
);

-- accounts: the account names the key may use; empty for every account.
ALTER TABLE api_keys ADD COLUMN accounts text[] NOT NULL DEFAULT '{}';
ALTER TABLE api_keys ADD COLUMN revoked_at timestamptz;

-- The audit log: who did what, from where, when. Never a secret, argument,
-- stdin, env or output; the script name is sealed with the master key.
CREATE TABLE audit (
	seq           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at            timestamptz NOT NULL,
	kind          text        NOT NULL,
	actor         text        NOT NULL DEFAULT '',
	source        text        NOT NULL DEFAULT '',
	account       text        NOT NULL DEFAULT '',
	work_id       text        NOT NULL DEFAULT '',
	instance_id   text        NOT NULL DEFAULT '',
	outcome       text        NOT NULL DEFAULT '',
	sealed_script bytea,
	detail        text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_at ON audit (at);

-- Append-only: rows are never changed nor removed (nor truncated).
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'the audit log is append-only';
END
$$;
CREATE TRIGGER audit_no_update_delete BEFORE UPDATE OR DELETE ON audit
	FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
	FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
`},
	{version: 3, name: "work listings", sql: `
-- WorkList: units newest first, of every account or of one.
CREATE INDEX work_queued_at_id ON work (queued_at, id);
CREATE INDEX work_account_queued_at_id ON work (account, queued_at, id);
-- AccountStats: the units in flight of each account.
CREATE INDEX work_claimed ON work (account) WHERE state = 'claimed';
`},
	{version: 4, name: "dashboard sign-outs", sql: `
-- Dashboard sessions signed out of, by the random id their cookie carries:
-- every replica refuses such a cookie although its signature holds. A row
-- is needed until the session would have expired anyway (expires_at),
-- then purged.
CREATE TABLE dashboard_sessions_ended (
	id         text        COLLATE "C" PRIMARY KEY,
	expires_at timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_ended_expires_at ON dashboard_sessions_ended (expires_at);
`},
	{version: 5, name: "the poll each claim was made for", sql: `
-- The proxy process (its run id) and the poll of that run (its number) a
-- unit was claimed for: a proxy that says it never read that poll's answer
-- has the unit ended at once (WorkClaimedByPolls). Found through
-- work_claimed, an account's claimed units.
ALTER TABLE work ADD COLUMN claim_run text NOT NULL DEFAULT '';
ALTER TABLE work ADD COLUMN claim_poll bigint NOT NULL DEFAULT 0;
`},
	{version: 6, name: "listing indexes of the units that ended without success", sql: `
-- WorkList by failed, timed_out or cancelled, of one account or of every
-- account: newest first in that state. Those units are usually few among
-- the succeeded, and walking work_account_queued_at_id or work_queued_at_id
-- for them read every unit of the table, or of the account, to list a
-- handful. A succeeded unit has no entry: a completion to succeeded writes
-- neither index (state is already in the predicates of work_queued and
-- work_open_deadline, so no completion was a HOT update before either).
CREATE INDEX work_unsuccessful ON work (state, queued_at, id)
	WHERE state IN ('failed', 'timed_out', 'cancelled');
CREATE INDEX work_account_unsuccessful ON work (account, state, queued_at, id)
	WHERE state IN ('failed', 'timed_out', 'cancelled');
`},
	{version: 7, name: "instances that said they were stopping", sql: `
-- The time of the poll in which an instance said it was stopping
-- (PollRequest.stopping), NULL when its latest poll did not. The instance
-- is stopped while it is at least last_poll_at: a later poll recorded by a
-- replica predating the column moves last_poll_at past it.
ALTER TABLE instances ADD COLUMN stopped_at timestamptz;
`},
	{version: 8, name: "the run and number of an instance's poll", sql: `
-- The run id and poll_seq of the poll recorded (PollRequest.run_id,
-- poll_seq; '' and 0 when it had none). A poll of that run numbered before
-- it is older and changes nothing, however late it is written: a poll on
-- its way when the process polled again to say it stops does not end the
-- stop. A replica predating the columns leaves them as they were.
ALTER TABLE instances ADD COLUMN poll_run text NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN poll_seq bigint NOT NULL DEFAULT 0;
`},
	{version: 9, name: "instances whose polls are refused for want of a usable key", sql: `
-- The time of the poll refused because the instance held no usable key of
-- its account (a profile of before a key rotation), NULL when its latest
-- poll was not refused, and the key ids that poll listed ('1,2'). The
-- instance is refused while refused_at is at least last_poll_at: a later
-- poll recorded by a replica predating the columns moves last_poll_at past
-- it.
ALTER TABLE instances ADD COLUMN refused_at timestamptz;
ALTER TABLE instances ADD COLUMN refused_key_ids text NOT NULL DEFAULT '';
`},
	{version: 10, name: "instances whose polls are refused for an expired account token", sql: `
-- Why the refused poll recorded (refused_at) was refused: 'token_expired'
-- for a poll that presented the account's token of before a rotation whose
-- overlap window had ended (a proxy still running the whole profile of
-- before a key rotation; refused_key_ids is then ''), '' for one refused
-- for want of a usable key or not refused. A replica predating the
-- column leaves it as it was, records no poll refused for its token, and
-- writes the key ids of a poll it refuses for want of a usable key, which
-- say the cause then.
ALTER TABLE instances ADD COLUMN refused_cause text NOT NULL DEFAULT '';
`},
	{version: 11, name: "audit events deleted past audit_retention", sql: `
-- The audit log's old events may be deleted past audit_retention, and only
-- those: a purge first records here the time before which it deletes the
-- events (with an audit.purged event, stamped later, in the same
-- transaction), and the log's delete trigger refuses any event stamped at
-- or after the latest recorded, and the newest event. A record must be a
-- day older than the database's clock at least (a replica whose clock runs
-- ahead may not make one that reaches today's events). So the log stays
-- append-only but for its old events, whose deletion is itself on record.
-- Rows here are never changed nor removed (nor truncated).
CREATE TABLE audit_purged (
	before timestamptz PRIMARY KEY,
	at     timestamptz NOT NULL
);
CREATE FUNCTION audit_purged_keeps_a_day() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.before > now() - interval '24 hours' THEN
		RAISE EXCEPTION 'the audit log is append-only but for a purge, which keeps at least its last day of events';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER audit_purged_keeps_a_day BEFORE INSERT ON audit_purged
	FOR EACH ROW EXECUTE FUNCTION audit_purged_keeps_a_day();
CREATE TRIGGER audit_purged_no_update_delete BEFORE UPDATE OR DELETE ON audit_purged
	FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_purged_no_truncate BEFORE TRUNCATE ON audit_purged
	FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
-- The triggers on audit stay as they were (an older replica's writes meet
-- the same ones during a rolling upgrade): their function lets a DELETE
-- of an event stamped before the latest recorded time through, but for
-- the newest event.
CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' AND TG_TABLE_NAME = 'audit' THEN
		IF OLD.at < (SELECT max(before) FROM audit_purged) AND OLD.seq < (SELECT max(seq) FROM audit) THEN
			RETURN OLD;
		END IF;
		RAISE EXCEPTION 'the audit log is append-only: only events stamped before a recorded purge are deleted, and never the newest';
	END IF;
	RAISE EXCEPTION 'the audit log is append-only';
END
$$;
-- Both functions look names up in this schema and the catalog alone,
-- whatever the session's search_path: a session's temporary table, or a
-- function or operator of its own schema (now(), <), found first there,
-- would decide for them.
DO $do$ BEGIN
	EXECUTE format('ALTER FUNCTION audit_append_only() SET search_path = pg_catalog, %I, pg_temp', current_schema());
	EXECUTE format('ALTER FUNCTION audit_purged_keeps_a_day() SET search_path = pg_catalog, %I, pg_temp', current_schema());
END $do$;
`},
}

// migrationLockKey is the advisory lock (two int4 keys: the first fixed for
// this program, the second per schema) that serialises migrations.
const migrationLockKey = `pg_advisory_xact_lock(hashtext('opsgate automator schema migrations'), hashtext(current_schema()))`

// migrate applies the migrations not yet recorded in schema_migrations, all
// in one transaction that first takes an advisory lock: replicas starting
// together queue on the lock, and each finds the steps the first applied
// already recorded. The transaction-level lock is released by commit or
// rollback, and by PostgreSQL if the connection dies, so a crashed replica
// never leaves it held. It refuses a schema newer than this binary knows,
// and one that holds another application's tables and not the automator's
// (refuseOtherApplications).
// It returns the version the schema was at, 0 for a new one, and the one
// it is at now: the same when nothing was applied.
func migrate(ctx context.Context, pool *pgxpool.Pool) (from, to int, err error) {
	return migrateWith(ctx, pool, migrations)
}

// migrateWith is migrate with the given steps (a prefix of migrations, for a
// test that needs a database of an older schema).
func migrateWith(ctx context.Context, pool *pgxpool.Pool, steps []migration) (from, to int, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var schema *string
		var searchPath string
		if err := tx.QueryRow(ctx, `SELECT current_schema(), current_setting('search_path')`).Scan(&schema, &searchPath); err != nil {
			return fmt.Errorf("migrating schema: reading the search_path: %w", err)
		}
		if schema == nil {
			return fmt.Errorf("migrating schema: no schema of search_path %q exists; create it (CREATE SCHEMA) or set search_path in the URL to one that does", searchPath)
		}
		if _, err := tx.Exec(ctx, `SELECT `+migrationLockKey); err != nil {
			return fmt.Errorf("migrating schema: taking the migration lock: %w", err)
		}
		if err := refuseOtherApplications(ctx, tx, *schema); err != nil {
			return fmt.Errorf("migrating schema: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer     PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return fmt.Errorf("migrating schema: creating schema_migrations: %w", err)
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return fmt.Errorf("migrating schema: reading the version: %w", err)
		}
		latest := steps[len(steps)-1].version
		if current > latest {
			return fmt.Errorf("migrating schema: the database is at version %d, newer than this binary knows (%d); run a newer automator", current, latest)
		}
		from, to = current, latest
		for _, m := range steps {
			if m.version <= current {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migrating schema to version %d (%s): %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, m.version); err != nil {
				return fmt.Errorf("migrating schema to version %d (%s): recording it: %w", m.version, m.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return from, to, nil
}
