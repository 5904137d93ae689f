package pgstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestAuditLogIsAppendOnly: the database itself refuses to change, remove
// or truncate an audit event, whoever asks.
func TestAuditLogIsAppendOnly(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	if _, err := s.AuditAppend(t.Context(), store.AuditEvent{At: time.Now(), Kind: store.AuditAuthFailed, Detail: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE audit SET detail = 'changed'`, `DELETE FROM audit`, `TRUNCATE audit`} {
		if _, err := s.pool.Exec(t.Context(), q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want it refused as append-only", q, err)
		}
	}
	got, err := s.AuditList(t.Context(), store.AuditListParams{Limit: 10})
	if err != nil || len(got) != 1 || got[0].Detail != "x" {
		t.Fatalf("after the refused changes AuditList = %+v, %v; want the one event unchanged", got, err)
	}
}

// TestAuditLogIsAppendOnlyButForItsPurgedEvents: once a purge has recorded
// how far it deletes, the database still refuses to remove any later
// event, to change any, to change, remove or truncate the record of the
// purge, and to record one that reaches the last day of its clock, even
// for a session whose temporary table of the record's name comes first in
// its search_path.
func TestAuditLogIsAppendOnlyButForItsPurgedEvents(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	now := time.Now()
	for i, d := range []time.Duration{72 * time.Hour, time.Hour, time.Minute} {
		if _, err := s.AuditAppend(t.Context(), store.AuditEvent{At: now.Add(-d), Kind: store.AuditAuthFailed, Detail: fmt.Sprint("event ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.AuditPurge(t.Context(), store.AuditPurgeParams{Now: now, Retention: 24 * time.Hour, Max: 10,
		Audit: store.AuditEvent{Kind: store.AuditPurged, Detail: "test"}}); err != nil || n != 1 {
		t.Fatalf("AuditPurge: %d, %v; want the oldest event deleted", n, err)
	}
	for _, q := range []string{`DELETE FROM audit`, `DELETE FROM audit WHERE detail = 'event 1'`, `UPDATE audit SET detail = 'changed'`,
		`INSERT INTO audit_purged (before, at) VALUES (now() - interval '1 hour', now())`,
		// A table of a session's own that the triggers' function would
		// find first through its search_path, saying everything was purged.
		`CREATE TEMP TABLE audit_purged (before timestamptz); INSERT INTO pg_temp.audit_purged VALUES ('infinity'); DELETE FROM audit`,
		`UPDATE audit_purged SET before = before + interval '1 day'`, `DELETE FROM audit_purged`, `TRUNCATE audit_purged`, `TRUNCATE audit`} {
		if _, err := s.pool.Exec(t.Context(), q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want it refused as append-only", q, err)
		}
	}
	got, err := s.AuditList(t.Context(), store.AuditListParams{Limit: 10})
	if err != nil || len(got) != 3 || got[0].Detail != "event 1" || got[1].Detail != "event 2" || got[2].Kind != store.AuditPurged {
		t.Fatalf("after the refused changes AuditList = %+v, %v; want events 1 and 2 and the purge's, unchanged", got, err)
	}
}

// TestAReplicaWhoseClockRunsAheadPurgesNoAuditEventItsRetentionKeeps: the
// purge's time is read on the earlier of the replica's clock and the
// database's, so a replica two days ahead deletes, with a retention of a
// day, only the events older than a day on the database's clock.
func TestAReplicaWhoseClockRunsAheadPurgesNoAuditEventItsRetentionKeeps(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	now, err := s.DatabaseClock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, age := range []time.Duration{30 * time.Hour, time.Hour, time.Minute} {
		if _, err := s.AuditAppend(t.Context(), store.AuditEvent{At: now.Add(-age), Kind: store.AuditAuthFailed, Detail: age.String()}); err != nil {
			t.Fatal(err)
		}
	}
	ahead := now.Add(49 * time.Hour)
	if n, err := s.AuditPurge(t.Context(), store.AuditPurgeParams{Now: ahead, Retention: 24 * time.Hour, Max: 10,
		Audit: store.AuditEvent{Kind: store.AuditPurged, Detail: "test"}}); err != nil || n != 1 {
		t.Errorf("AuditPurge(24h) from a replica 49 h ahead: %d, %v; want the event of 30 h ago alone deleted", n, err)
	}
}

// TestTheAuditTriggersIgnoreTheSessionsSearchPath: the triggers' functions
// look names up in the automator's schema and the catalog alone: a session
// whose search_path puts first a schema of its own, with a now() that says
// 'infinity', cannot record a purge of every event (found by a review).
func TestTheAuditTriggersIgnoreTheSessionsSearchPath(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	if _, err := s.AuditAppend(t.Context(), store.AuditEvent{At: time.Now(), Kind: store.AuditAuthFailed, Detail: "x"}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var schema string
	if err := conn.QueryRow(t.Context(), `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	own := schema + "_own"
	for _, q := range []string{
		`CREATE SCHEMA ` + own,
		`CREATE FUNCTION ` + own + `.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'infinity'::timestamptz $$`,
		`SET search_path = ` + own + `, pg_catalog, ` + schema,
	} {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO audit_purged (before, at) VALUES ('infinity', pg_catalog.now())`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("a purge record of 'infinity' by a session with a now() of its own: %v; want it refused as append-only", err)
	}
	if got, err := s.AuditList(t.Context(), store.AuditListParams{Limit: 10}); err != nil || len(got) != 1 {
		t.Errorf("the audit log after: %+v, %v; want its one event", got, err)
	}
}
