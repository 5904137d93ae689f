package sqlitestore

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestAuditListSinceStartsInTheIndexOnAt: the first page of `automator
// audit --since` must find where to start in audit_at, not walk the rowids
// from the first event (SQLite's plan of "seq > 0 AND at >= ?" by seq),
// and read the table by seq from there, without a sort. A next page (after
// a seq) starts at that seq and needs no index.
func TestAuditListSinceStartsInTheIndexOnAt(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	for _, c := range []struct {
		name    string
		p       store.AuditListParams
		indexed bool
	}{
		{"first page since an hour ago", store.AuditListParams{Since: testNow.Add(-time.Hour), Limit: 1000}, true},
		{"next page since an hour ago", store.AuditListParams{Since: testNow.Add(-time.Hour), AfterSeq: 7, Limit: 1000}, false},
		{"first page of every event", store.AuditListParams{Limit: 1000}, false},
		{"first page of one unit since a day before it", store.AuditListParams{Since: testNow.Add(-24 * time.Hour), WorkID: "w_1", Limit: 1000}, true},
		{"first page of an account's events of two kinds", store.AuditListParams{Account: "acme", Kinds: []string{store.AuditWorkQueued, store.AuditWorkEnded}, Limit: 1000}, false},
		{"next page of an account's events since an hour ago", store.AuditListParams{Since: testNow.Add(-time.Hour), AfterSeq: 7, Account: "acme", Limit: 1000}, false},
	} {
		q, args := auditListQuery(c.p)
		plan := queryPlan(t, s.read, q, args...)
		joined := strings.Join(plan, "; ")
		if indexed := slices.ContainsFunc(plan, func(step string) bool { return strings.Contains(step, " INDEX audit_at (at>?)") }); indexed != c.indexed {
			t.Errorf("%s: plan %q; searches audit_at by at: %v, want %v", c.name, joined, indexed, c.indexed)
		}
		if !slices.Contains(plan, "SEARCH audit USING INTEGER PRIMARY KEY (rowid>?)") || strings.Contains(joined, "TEMP B-TREE") || strings.Contains(joined, "SCAN audit") {
			t.Errorf("%s: plan %q; want the table read by seq from a start, without a sort", c.name, joined)
		}
	}
}
