package pgstore

import (
	"strings"
	"testing"
	"time"

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
