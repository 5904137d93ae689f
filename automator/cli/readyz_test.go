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

// TestReadyzLogsOncePerKindOfReason: /readyz points to serve's log for why
// it is not ready, so the log says "not ready" again when the kind of
// reason changes while the automator stays not ready: the store not
// answering, or answering with its schema behind. A store whose error text
// alternates within one kind (a connect timeout, then a refused
// connection; here a real SQLite store whose schema_migrations table is
// gone, then has no version column, then is gone again) writes no line per
// load-balancer check: one per kind change, and "ready again" at the end.
func TestReadyzLogsOncePerKindOfReason(t *testing.T) {
	t.Parallel()
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
	for range 3 {
		exec(`DROP TABLE IF EXISTS schema_migrations`)
		check(http.StatusServiceUnavailable) // no such table
		exec(`CREATE TABLE schema_migrations (other INTEGER)`)
		check(http.StatusServiceUnavailable) // no such column
	}
	exec(`DROP TABLE schema_migrations`)
	exec(`CREATE TABLE schema_migrations AS SELECT * FROM kept WHERE version < (SELECT MAX(version) FROM kept)`)
	check(http.StatusServiceUnavailable) // behind again
	check(http.StatusServiceUnavailable)
	exec(`DROP TABLE schema_migrations`)
	exec(`ALTER TABLE kept RENAME TO schema_migrations`)
	check(http.StatusOK)
	check(http.StatusOK)

	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		got = append(got, l[strings.Index(l, "level="):])
	}
	if len(got) != 4 ||
		!strings.HasPrefix(got[0], `level=WARN msg="not ready"`) || !strings.Contains(got[0], "the schema is at version") ||
		!strings.HasPrefix(got[1], `level=WARN msg="not ready"`) || !strings.Contains(got[1], "no such table: schema_migrations") ||
		!strings.HasPrefix(got[2], `level=WARN msg="not ready"`) || !strings.Contains(got[2], "the schema is at version") ||
		got[3] != `level=INFO msg="ready again"` {
		t.Errorf("log:\n%s\nwant \"not ready\" with the schema behind, \"not ready\" with the store failing (once, though its error changed), \"not ready\" with the schema behind again, then \"ready again\"", strings.Join(got, "\n"))
	}
}
