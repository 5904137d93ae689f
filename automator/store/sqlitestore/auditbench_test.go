package sqlitestore

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// auditBacklog is how many events the audit log of BenchmarkAuditListSince
// holds, over 60 days.
var auditBacklog = flag.Int("audit.backlog", 200000, "audit events in the database of BenchmarkAuditListSince")

// BenchmarkAuditListSince times the first page of `automator audit --since
// 1h` (1000 events, Since an hour before the last event) on an audit log of
// -audit.backlog events spread over 60 days: "walk" is the statement of a
// next page run from AfterSeq 0, the plan SQLite gave the first page before
// (the rowids walked from the first event); "AuditList" is what the store
// runs now (the start found in audit_at). The last two time the filters
// of `automator audit --work` and `--account`, which no index holds.
func BenchmarkAuditListSince(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "automator.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	n := *auditBacklog
	span := 60 * 24 * time.Hour
	step := span / time.Duration(n)
	const batch = 10000
	for i := 0; i < n; i += batch {
		err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
			for j := i; j < min(i+batch, n); j++ {
				if _, err := insertAudit(ctx, tx, store.AuditEvent{
					At: testNow.Add(time.Duration(j) * step), Kind: store.AuditWorkEnded, Actor: "account:acme", Account: "acme",
					WorkID: fmt.Sprintf("w-%d", j), InstanceID: "host-a", Outcome: "succeeded", SealedScript: make([]byte, 40), Detail: "some detail",
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	since := testNow.Add(span - time.Hour)
	want := min(1000, int(time.Hour/step))
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			q, args := auditListQuery(store.AuditListParams{AfterSeq: 1, Since: since, Limit: 1000})
			args[0] = 0 // the next page's statement, from the first event
			rows, err := s.reads.QueryContext(ctx, q, args...)
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for rows.Next() {
				var e store.AuditEvent
				var at int64
				if err := rows.Scan(&e.Seq, &at, &e.Kind, &e.Actor, &e.Source, &e.Account, &e.WorkID, &e.InstanceID, &e.Outcome, &e.SealedScript, &e.Detail); err != nil {
					b.Fatal(err)
				}
				got++
			}
			if err := rows.Close(); err != nil || got < want-1 {
				b.Fatalf("read %d events, %v; want about %d", got, err, want)
			}
		}
	})
	b.Run("AuditList", func(b *testing.B) {
		for b.Loop() {
			got, err := s.AuditList(ctx, store.AuditListParams{Since: since, Limit: 1000})
			if err != nil || len(got) < want-1 {
				b.Fatalf("AuditList: %d events, %v; want about %d", len(got), err, want)
			}
		}
	})
	// A unit's trail, as `automator audit --work` reads it: from a day
	// before it was queued, ten days ago, to the end of the log, keeping
	// its events only (no index holds the work id).
	b.Run("one unit ten days back", func(b *testing.B) {
		j := n - int(10*24*time.Hour/step)
		for b.Loop() {
			got, err := s.AuditList(ctx, store.AuditListParams{Since: testNow.Add(time.Duration(j)*step - 24*time.Hour), WorkID: fmt.Sprintf("w-%d", j), Limit: 1000})
			if err != nil || len(got) != 1 {
				b.Fatalf("AuditList: %d events, %v; want 1", len(got), err)
			}
		}
	})
	// An account with no event, every event read.
	b.Run("an account in the whole log", func(b *testing.B) {
		for b.Loop() {
			got, err := s.AuditList(ctx, store.AuditListParams{Account: "globex", Limit: 1000})
			if err != nil || len(got) != 0 {
				b.Fatalf("AuditList: %d events, %v; want none", len(got), err)
			}
		}
	})
}
