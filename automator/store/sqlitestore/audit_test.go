package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestAuditLogIsAppendOnly: the database itself refuses to change or remove
// an audit event, whoever asks.
func TestAuditLogIsAppendOnly(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
	if _, err := s.AuditAppend(t.Context(), store.AuditEvent{At: time.Now(), Kind: store.AuditAuthFailed, Detail: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE audit SET detail = 'changed'`, `DELETE FROM audit`,
		`INSERT OR REPLACE INTO audit (seq, at, kind, detail) SELECT seq, at, kind, 'changed' FROM audit`,
		`REPLACE INTO audit (seq, at, kind, detail) SELECT seq, at, kind, 'changed' FROM audit`,
		`INSERT INTO audit (seq, at, kind, detail) SELECT seq, at, kind, 'changed' FROM audit WHERE true ON CONFLICT (seq) DO UPDATE SET detail = 'changed'`} {
		err := s.writeTx(t.Context(), func(ctx context.Context, tx querier) error {
			_, err := tx.ExecContext(ctx, q)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "append-only") {
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
// event, to change any, to change or remove the record of the purge, and
// to record one that reaches the last day of events.
func TestAuditLogIsAppendOnlyButForItsPurgedEvents(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "a.db"))
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
		fmt.Sprintf(`INSERT INTO audit_purged (before, at) VALUES (%d, %d)`, now.Add(-time.Hour).UnixNano(), now.UnixNano()),
		`UPDATE audit_purged SET before = before + 10`, `DELETE FROM audit_purged`,
		`INSERT OR REPLACE INTO audit_purged (before, at) SELECT before, at + 1 FROM audit_purged`} {
		err := s.writeTx(t.Context(), func(ctx context.Context, tx querier) error {
			_, err := tx.ExecContext(ctx, q)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want it refused as append-only", q, err)
		}
	}
	got, err := s.AuditList(t.Context(), store.AuditListParams{Limit: 10})
	if err != nil || len(got) != 3 || got[0].Detail != "event 1" || got[1].Detail != "event 2" || got[2].Kind != store.AuditPurged {
		t.Fatalf("after the refused changes AuditList = %+v, %v; want events 1 and 2 and the purge's, unchanged", got, err)
	}
}
