package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/automator/store/storetest"
)

// upgradeFill writes the data of d that a schema version holds, with the
// columns of that version, as the automator of that version wrote them.
type upgradeFill struct {
	has  storetest.UpgradeHas
	fill func(ctx context.Context, tx pgx.Tx, d *storetest.UpgradeData, has storetest.UpgradeHas) error
}

// upgradeFills has one fill per schema version. A new migration needs its
// own entry here (TestEveryEarlierSchemaUpgradesWithNothingLost fails
// until it has one): from then on, databases of that version are checked
// through every later migration.
var upgradeFills = map[int]upgradeFill{
	1:  {storetest.UpgradeHas{Replicas: true}, fillV1},
	2:  {hasV2, fillV2},
	3:  {hasV2, fillV2}, // new indexes only
	4:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV4},
	5:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV4}, // new columns with defaults only
	6:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV4}, // new indexes only
	7:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV4}, // a new nullable column only
	8:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV4}, // new columns with defaults only
	9:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV4}, // new columns, nullable or with defaults
	10: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV4}, // a new column with a default only
	11: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV4}, // a new table, empty, and triggers
}

var hasV2 = storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true}

// atVersion makes a schema at version n and returns its connection string
// and a pool to fill it (the caller closes it).
func atVersion(t *testing.T, n int) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := pgtest.DSN(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := migrateWith(t.Context(), pool, migrations[:n]); err != nil {
		pool.Close()
		t.Fatalf("migrating to version %d: %v", n, err)
	}
	return dsn, pool
}

// TestEveryEarlierSchemaUpgradesWithNothingLost makes a schema at each
// version (the latest too, as the baseline), fills it with an account, its
// units in every state, instances, replicas, API keys and the rest that
// version holds, opens it as the store (migrating it to the latest) and
// checks through the store that every unit, credential and record came
// through with its guarantees: guarantee 3 (Durable) across an upgrade.
func TestEveryEarlierSchemaUpgradesWithNothingLost(t *testing.T) {
	t.Parallel()
	latest := migrations[len(migrations)-1].version
	for v := 1; v <= latest; v++ {
		if _, ok := upgradeFills[v]; !ok {
			t.Errorf("schema version %d has no fill in upgradeFills: write the data a database of that version holds, with its columns", v)
		}
	}
	for v := 1; v <= latest; v++ {
		f, ok := upgradeFills[v]
		if !ok {
			continue
		}
		t.Run(fmt.Sprintf("from version %d", v), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			d := storetest.NewUpgradeData(t)
			dsn, old := atVersion(t, v)
			err := pgx.BeginFunc(ctx, old, func(tx pgx.Tx) error { return f.fill(ctx, tx, d, f.has) })
			old.Close()
			if err != nil {
				t.Fatalf("filling the version %d schema: %v", v, err)
			}
			s := open(t, dsn)
			if rows := migrationRows(t, s); len(rows) != len(migrations) {
				t.Fatalf("schema_migrations holds %d rows after migrating from version %d, want %d", len(rows), v, len(migrations))
			}
			if from, to := s.Migrated(); from != v || to != latest {
				t.Errorf("Migrated() = %d, %d after opening a schema of version %d; want %d, %d", from, to, v, v, latest)
			}
			storetest.CheckUpgraded(t, s, d, f.has)
		})
	}
}

// execAll runs statements, each with its arguments, and stops at the
// first error.
func execAll(ctx context.Context, tx pgx.Tx, stmts ...[]any) error {
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s[0].(string), s[1:]...); err != nil {
			return fmt.Errorf("%s: %w", s[0], err)
		}
	}
	return nil
}

// fillV1: accounts, work, instances, api keys (id, hash, name,
// created_at), replicas.
func fillV1(ctx context.Context, tx pgx.Tx, d *storetest.UpgradeData, has storetest.UpgradeHas) error {
	a := d.Account
	stmts := [][]any{{`INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES ($1, $2, $3, $4, $5)`,
		a.Name, a.TokenHash, int64(a.KeyID), a.SealedKey, a.CreatedAt}}
	for _, w := range d.Work(has) {
		stmts = append(stmts, []any{`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline,
	claimed_at, instance_id, claim_id, finished_at, sealed_result, reason, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
			w.ID, w.Account, string(w.State), int64(w.KeyID), w.SealedCommand, w.QueuedAt, w.Deadline,
			nullTime(w.ClaimedAt), w.InstanceID, w.ClaimID, nullTime(w.FinishedAt), w.SealedResult, w.Reason, nullString(w.IdempotencyKey)})
	}
	for _, i := range d.Instances {
		stmts = append(stmts, []any{`INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight) VALUES ($1, $2, $3, $4, $5, $6)`,
			i.Account, i.InstanceID, i.Hostname, i.Version, i.LastPollAt, i.InFlight})
	}
	if !has.APIKeyScopes {
		for _, k := range d.APIKeys(has) {
			stmts = append(stmts, []any{`INSERT INTO api_keys (id, hash, name, created_at) VALUES ($1, $2, $3, $4)`,
				k.ID, k.Hash, k.Name, k.CreatedAt})
		}
	}
	for _, r := range d.Replicas {
		stmts = append(stmts, []any{`INSERT INTO replicas (replica_id, hostname, version, started_at, last_seen) VALUES ($1, $2, $3, $4, $5)`,
			r.ReplicaID, r.Hostname, r.Version, r.StartedAt, r.LastSeen})
	}
	return execAll(ctx, tx, stmts...)
}

// fillV2: version 1, a previous token and key, API keys with scopes
// (text[], empty for every account) and revocation (NULL while valid), the
// audit log.
func fillV2(ctx context.Context, tx pgx.Tx, d *storetest.UpgradeData, has storetest.UpgradeHas) error {
	if err := fillV1(ctx, tx, d, has); err != nil {
		return err
	}
	stmts := [][]any{
		{`INSERT INTO account_tokens (token_hash, account, valid_until) VALUES ($1, $2, $3)`,
			d.PrevTokenHash, d.Account.Name, d.PrevUntil},
		{`INSERT INTO account_keys (account, key_id, sealed_key, retired_at, usable_until) VALUES ($1, $2, $3, $4, $5)`,
			d.Account.Name, int64(d.PrevKey.ID), d.PrevSealedKey, d.PrevRetiredAt, d.PrevUntil},
	}
	for _, k := range d.APIKeys(has) {
		accounts := k.Accounts
		if accounts == nil {
			accounts = []string{}
		}
		stmts = append(stmts, []any{`INSERT INTO api_keys (id, hash, name, created_at, accounts, revoked_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			k.ID, k.Hash, k.Name, k.CreatedAt, accounts, nullTime(k.RevokedAt)})
	}
	for _, e := range d.Audit() {
		stmts = append(stmts, []any{`INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			e.At, e.Kind, e.Actor, e.Source, e.Account, e.WorkID, e.InstanceID, e.Outcome, e.SealedScript, e.Detail})
	}
	return execAll(ctx, tx, stmts...)
}

// fillV4: version 2 (and 3) and dashboard sign-outs.
func fillV4(ctx context.Context, tx pgx.Tx, d *storetest.UpgradeData, has storetest.UpgradeHas) error {
	if err := fillV2(ctx, tx, d, has); err != nil {
		return err
	}
	var stmts [][]any
	for _, s := range d.Sessions {
		stmts = append(stmts, []any{`INSERT INTO dashboard_sessions_ended (id, expires_at) VALUES ($1, $2)`, s.ID, s.Expires})
	}
	return execAll(ctx, tx, stmts...)
}

// nullTime is t, or NULL for the zero time (as the store writes them).
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// nullString is s, or NULL for "".
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// TestMigratedSaysWhatOpenApplied: a new schema is made from version 0,
// and one already current is not migrated (serve logs a migration only
// from a version of its own to a later one).
func TestMigratedSaysWhatOpenApplied(t *testing.T) {
	t.Parallel()
	latest := migrations[len(migrations)-1].version
	dsn := pgtest.DSN(t)
	if from, to := open(t, dsn).Migrated(); from != 0 || to != latest {
		t.Errorf("Migrated() = %d, %d after making the schema; want 0, %d", from, to, latest)
	}
	if from, to := open(t, dsn).Migrated(); from != latest || to != latest {
		t.Errorf("Migrated() = %d, %d after opening a current schema; want %d, %d", from, to, latest, latest)
	}
}
