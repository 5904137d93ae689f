package sqlitestore

import (
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// firstReleasesV1 is schema version 1 as the first releases (2026-11-29,
// before idempotency keys) made it: the work table without idempotency_key
// and its unique index. The step was edited in place after them, so their
// databases are at version 1 without what today's version 1 has.
var firstReleasesV1 = migration{version: 1, name: "accounts, work, instances, api keys", sql: `
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
	reason         TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX work_account_state_queued_at ON work (account, state, queued_at);
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
`}

// TestADatabaseOfTheFirstReleasesGetsIdempotencyKeys opens a database made
// by the first releases (version 1 without idempotency keys), with a queued
// and a claimed unit, and one that a binary without the repair already
// migrated to the latest version: in both, queueing work (with a key and
// without), listing, claiming, completing and expiring work all work, and
// the units written before come through.
func TestADatabaseOfTheFirstReleasesGetsIdempotencyKeys(t *testing.T) {
	t.Parallel()
	for _, already := range []bool{false, true} {
		name := "at version 1"
		if already {
			name = "already migrated without it"
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "automator.db")
			db, err := sql.Open("sqlite", dsn(path, false))
			if err != nil {
				t.Fatal(err)
			}
			steps := []migration{firstReleasesV1}
			if already {
				steps = append(steps, migrations[1:]...)
			}
			if err := migrateWith(ctx, db, steps); err != nil {
				t.Fatalf("making the first releases' database: %v", err)
			}
			at := toNanos(testNow)
			for _, stmt := range []string{
				`INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES ('acme', x'01', 1, x'02', 0)`,
				`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline) VALUES
					('w-queued', 'acme', 'queued', 1, x'03', ?1, ?1 + 3600000000000)`,
				`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, claimed_at, instance_id, claim_id) VALUES
					('w-claimed', 'acme', 'claimed', 1, x'03', ?1 - 1, ?1 + 1000, ?1, 'a', 'c-old')`,
			} {
				if _, err := db.ExecContext(ctx, stmt, at); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			s := open(t, path)
			now := testNow.Add(time.Second)
			keyed := store.WorkEnqueueParams{ID: "w-keyed", Account: "acme", KeyID: 1, SealedCommand: []byte("c"),
				Now: now, Deadline: now.Add(time.Hour), IdempotencyKey: "deploy-1", IdempotencySince: now.Add(-24 * time.Hour)}
			if w, err := s.WorkEnqueue(ctx, keyed); err != nil || w.ID != "w-keyed" || w.IdempotencyKey != "deploy-1" {
				t.Fatalf("WorkEnqueue with an idempotency key after the upgrade = %+v, %v; want w-keyed queued", w, err)
			}
			again := keyed
			again.ID = "w-again"
			if w, err := s.WorkEnqueue(ctx, again); !errors.Is(err, store.ErrDuplicate) || w.ID != "w-keyed" {
				t.Errorf("WorkEnqueue with the same key again = %q, %v; want w-keyed, ErrDuplicate", w.ID, err)
			}
			plain := keyed
			plain.ID, plain.IdempotencyKey = "w-plain", ""
			if _, err := s.WorkEnqueue(ctx, plain); err != nil {
				t.Fatalf("WorkEnqueue without a key after the upgrade: %v", err)
			}
			if w, err := s.WorkByIdempotencyKey(ctx, "acme", "deploy-1", now.Add(-time.Hour)); err != nil || w.ID != "w-keyed" {
				t.Errorf("WorkByIdempotencyKey(acme, deploy-1) = %q, %v; want w-keyed", w.ID, err)
			}
			listed, err := s.WorkList(ctx, store.WorkListParams{Account: "acme", Limit: 10})
			if want := []string{"w-plain", "w-keyed", "w-queued", "w-claimed"}; err != nil || !slices.Equal(workIDs(listed), want) {
				t.Errorf("WorkList(acme) after the upgrade = %v, %v; want %v", workIDs(listed), err, want)
			}
			claimed, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "b", Max: 5,
				ClaimIDs: []string{"c-1", "c-2", "c-3", "c-4", "c-5"}, Now: now})
			if want := []string{"w-queued", "w-keyed", "w-plain"}; err != nil || !slices.Equal(workIDs(claimed), want) {
				t.Errorf("WorkClaim after the upgrade = %v, %v; want %v", workIDs(claimed), err, want)
			}
			if w, err := s.WorkComplete(ctx, store.WorkCompleteParams{ID: "w-queued", ClaimID: "c-1", Account: "acme",
				State: store.StateSucceeded, SealedResult: []byte("r"), Now: now}); err != nil || w.State != store.StateSucceeded {
				t.Errorf("WorkComplete(w-queued) after the upgrade = %+v, %v; want succeeded", w, err)
			}
			expired, err := s.WorkExpire(ctx, store.WorkExpireParams{Now: now})
			if want := []string{"w-claimed"}; err != nil || !slices.Equal(workIDs(expired), want) {
				t.Errorf("WorkExpire after the upgrade = %v, %v; want %v", workIDs(expired), err, want)
			}
		})
	}
}

func workIDs(ws []store.Work) []string {
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	return ids
}
