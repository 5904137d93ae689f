package cli

import (
	"bytes"
	"database/sql"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestReadyzLogsTheCurrentReasonWhileNotReady: /readyz points to serve's
// log for why it is not ready, so the log says the reason again when it
// changes while the automator stays not ready (here a real SQLite store
// whose schema is first behind, then gone), and the log's last "not ready"
// is the current reason, not the first one. The same reason is logged once.
func TestReadyzLogsTheCurrentReasonWhileNotReady(t *testing.T) {
	path := filepath.Join(t.TempDir(), "automator.db")
	st, err := sqlitestore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var buf bytes.Buffer
	h := readyz(st, func() bool { return false }, slog.New(slog.NewTextHandler(&buf, nil)))
	check := func(want int) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != want {
			t.Fatalf("/readyz: %d %q, want %d", rec.Code, rec.Body.String(), want)
		}
	}
	check(http.StatusOK)
	exec(`CREATE TABLE kept AS SELECT * FROM schema_migrations`)
	exec(`DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)`)
	check(http.StatusServiceUnavailable)
	check(http.StatusServiceUnavailable)
	exec(`DROP TABLE schema_migrations`)
	check(http.StatusServiceUnavailable)
	check(http.StatusServiceUnavailable)
	exec(`ALTER TABLE kept RENAME TO schema_migrations`)
	check(http.StatusOK)

	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		got = append(got, l[strings.Index(l, "level="):])
	}
	if len(got) != 3 ||
		!strings.HasPrefix(got[0], `level=WARN msg="not ready"`) || !strings.Contains(got[0], "the schema is at version") ||
		!strings.HasPrefix(got[1], `level=WARN msg="not ready"`) || !strings.Contains(got[1], "no such table: schema_migrations") ||
		got[2] != `level=INFO msg="ready again"` {
		t.Errorf("log:\n%s\nwant \"not ready\" with the schema behind, \"not ready\" with the table gone, then \"ready again\", each once", strings.Join(got, "\n"))
	}
}
