package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/opsgate/opsgate/automator/store/storetest"
)

// upgradeFill writes the data of d that a schema version holds, with the
// columns of that version, as the automator of that version wrote them.
type upgradeFill struct {
	has  storetest.UpgradeHas
	fill func(ctx context.Context, db *sql.DB, d *storetest.UpgradeData, has storetest.UpgradeHas) error
}

// upgradeFills has one fill per schema version. A new migration needs its
// own entry here (TestEveryEarlierSchemaUpgradesWithNothingLost fails
// until it has one): from then on, databases of that version are checked
// through every later migration.
var upgradeFills = map[int]upgradeFill{
	1:  {storetest.UpgradeHas{}, fillV1},
	2:  {storetest.UpgradeHas{Replicas: true}, fillV2},
	3:  {hasV3, fillV3},
	4:  {hasV3, fillV3}, // new indexes only
	5:  {hasV3, fillV3}, // new indexes only
	6:  {hasV3, fillV3}, // the audit table rebuilt, same columns
	7:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7},
	8:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // new columns with defaults only
	9:  {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // a new column with a default only
	10: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // new indexes only
	11: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // a new column with a default only
	12: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // new columns with defaults only
	13: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // new columns with defaults only
	14: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // new columns with defaults only
	15: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // a new table, empty, and a trigger
	16: {storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true, DashboardSessions: true}, fillV7}, // triggers only
}

var hasV3 = storetest.UpgradeHas{Replicas: true, Rotation: true, APIKeyScopes: true, Audit: true}

// TestEveryEarlierSchemaUpgradesWithNothingLost makes a database at each
// schema version (the latest too, as the baseline), fills it with an
// account, its units in every state, instances, API keys and the rest that
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
			d := storetest.NewUpgradeData(t)
			path, old := atVersion(t, v)
			if err := f.fill(t.Context(), old, d, f.has); err != nil {
				t.Fatalf("filling the version %d database: %v", v, err)
			}
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			s := open(t, path)
			if rows := migrationRows(t, s); len(rows) != len(migrations) {
				t.Fatalf("schema_migrations holds %d rows after migrating from version %d, want %d", len(rows), v, len(migrations))
			}
			storetest.CheckUpgraded(t, s, d, f.has)
		})
	}
}

// execAll runs statements, each with its arguments, and stops at the first
// error.
func execAll(ctx context.Context, db *sql.DB, stmts ...[]any) error {
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s[0].(string), s[1:]...); err != nil {
			return fmt.Errorf("%s: %w", s[0], err)
		}
	}
	return nil
}

// fillV1: accounts, work, instances, api keys (id, hash, name, created_at).
func fillV1(ctx context.Context, db *sql.DB, d *storetest.UpgradeData, has storetest.UpgradeHas) error {
	a := d.Account
	stmts := [][]any{{`INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES (?, ?, ?, ?, ?)`,
		a.Name, a.TokenHash, a.KeyID, a.SealedKey, toNanos(a.CreatedAt)}}
	for _, w := range d.Work(has) {
		var key any
		if w.IdempotencyKey != "" {
			key = w.IdempotencyKey
		}
		var result any
		if w.SealedResult != nil {
			result = w.SealedResult
		}
		stmts = append(stmts, []any{`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline,
	claimed_at, instance_id, claim_id, finished_at, sealed_result, reason, idempotency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			w.ID, w.Account, string(w.State), w.KeyID, w.SealedCommand, toNanos(w.QueuedAt), toNanos(w.Deadline),
			toNanos(w.ClaimedAt), w.InstanceID, w.ClaimID, toNanos(w.FinishedAt), result, w.Reason, key})
	}
	for _, i := range d.Instances {
		stmts = append(stmts, []any{`INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight) VALUES (?, ?, ?, ?, ?, ?)`,
			i.Account, i.InstanceID, i.Hostname, i.Version, toNanos(i.LastPollAt), i.InFlight})
	}
	if !has.APIKeyScopes {
		for _, k := range d.APIKeys(has) {
			stmts = append(stmts, []any{`INSERT INTO api_keys (id, hash, name, created_at) VALUES (?, ?, ?, ?)`,
				k.ID, k.Hash, k.Name, toNanos(k.CreatedAt)})
		}
	}
	return execAll(ctx, db, stmts...)
}

// fillV2: version 1 and replicas.
func fillV2(ctx context.Context, db *sql.DB, d *storetest.UpgradeData, has storetest.UpgradeHas) error {
	if err := fillV1(ctx, db, d, has); err != nil {
		return err
	}
	var stmts [][]any
	for _, r := range d.Replicas {
		stmts = append(stmts, []any{`INSERT INTO replicas (replica_id, hostname, version, started_at, last_seen) VALUES (?, ?, ?, ?, ?)`,
			r.ReplicaID, r.Hostname, r.Version, toNanos(r.StartedAt), toNanos(r.LastSeen)})
	}
	return execAll(ctx, db, stmts...)
}

// fillV3: version 2, a previous token and key, API keys with scopes and
// revocation (JSON array of accounts, ” for every account), the audit log.
func fillV3(ctx context.Context, db *sql.DB, d *storetest.UpgradeData, has storetest.UpgradeHas) error {
	if err := fillV2(ctx, db, d, has); err != nil {
		return err
	}
	stmts := [][]any{
		{`INSERT INTO account_tokens (token_hash, account, valid_until) VALUES (?, ?, ?)`,
			d.PrevTokenHash, d.Account.Name, toNanos(d.PrevUntil)},
		{`INSERT INTO account_keys (account, key_id, sealed_key, retired_at, usable_until) VALUES (?, ?, ?, ?, ?)`,
			d.Account.Name, d.PrevKey.ID, d.PrevSealedKey, toNanos(d.PrevRetiredAt), toNanos(d.PrevUntil)},
	}
	for _, k := range d.APIKeys(has) {
		accounts := ""
		if len(k.Accounts) > 0 {
			b, err := json.Marshal(k.Accounts)
			if err != nil {
				return err
			}
			accounts = string(b)
		}
		stmts = append(stmts, []any{`INSERT INTO api_keys (id, hash, name, created_at, accounts, revoked_at) VALUES (?, ?, ?, ?, ?, ?)`,
			k.ID, k.Hash, k.Name, toNanos(k.CreatedAt), accounts, toNanos(k.RevokedAt)})
	}
	for _, e := range d.Audit() {
		stmts = append(stmts, []any{`INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			toNanos(e.At), e.Kind, e.Actor, e.Source, e.Account, e.WorkID, e.InstanceID, e.Outcome, e.SealedScript, e.Detail})
	}
	return execAll(ctx, db, stmts...)
}

// fillV7: version 3 (to 6) and dashboard sign-outs.
func fillV7(ctx context.Context, db *sql.DB, d *storetest.UpgradeData, has storetest.UpgradeHas) error {
	if err := fillV3(ctx, db, d, has); err != nil {
		return err
	}
	var stmts [][]any
	for _, s := range d.Sessions {
		stmts = append(stmts, []any{`INSERT INTO dashboard_sessions_ended (id, expires_at) VALUES (?, ?)`, s.ID, toNanos(s.Expires)})
	}
	return execAll(ctx, db, stmts...)
}
