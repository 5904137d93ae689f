// Package pgtest gives tests a PostgreSQL server and a fresh schema each.
//
// The server is the one AUTOMATOR_TEST_POSTGRES names (a postgres:// URL).
// When it is unset, Main starts a throwaway cluster with the repository's
// scripts/pg-start.sh for the test binary's run and removes it after. Tests
// skip, saying why, only when neither works because no PostgreSQL binaries
// exist, and not even then under AUTOMATOR_REQUIRE_POSTGRES=1 (make test
// sets it): then they fail.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Environment variables.
const (
	// EnvURL names the server: postgres://USER:PASSWORD@HOST:PORT/DB?...
	EnvURL = "AUTOMATOR_TEST_POSTGRES"
	// EnvRequire, when set, turns a missing server into a test failure.
	EnvRequire = "AUTOMATOR_REQUIRE_POSTGRES"
)

var (
	serverURL string // the server, once known
	problem   string // why there is none
	noBinary  bool   // the problem is that PostgreSQL is not installed
)

// adminPools are the connections DSNIn creates and drops schemas on, one
// pool per database, closed when Main returns. A connection of its own for
// each statement cost the server a backend's start, about 30 ms of its CPU
// on the CI machines, twice per test: two thirds of the connections the
// pgstore tests made, and a fifth of the server's CPU in them.
var (
	adminMu    sync.Mutex
	adminPools = map[string]*pgxpool.Pool{}
)

// adminPool returns the pool of database db (a URL), made when first asked.
func adminPool(db string) (*pgxpool.Pool, error) {
	adminMu.Lock()
	defer adminMu.Unlock()
	if p := adminPools[db]; p != nil {
		return p, nil
	}
	p, err := pgxpool.New(context.Background(), db)
	if err != nil {
		return nil, err
	}
	adminPools[db] = p
	return p, nil
}

// closeAdminPools closes the pools of adminPool, or only db's when given.
func closeAdminPools(db ...string) {
	adminMu.Lock()
	defer adminMu.Unlock()
	for name, p := range adminPools {
		if len(db) == 0 || name == db[0] {
			p.Close()
			delete(adminPools, name)
		}
	}
}

// Main runs the tests of a package with a PostgreSQL server: call it from
// TestMain, os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	serverURL = os.Getenv(EnvURL)
	if serverURL == "" {
		stop, err := startCluster()
		if err != nil {
			problem = err.Error()
		} else {
			defer stop()
		}
	}
	defer closeAdminPools()
	return m.Run()
}

// startCluster runs scripts/pg-start.sh and sets serverURL.
func startCluster() (stop func(), err error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "scripts", "pg-start.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 3 {
			noBinary = true
			return nil, fmt.Errorf("%s is unset and %s", EnvURL, strings.TrimSpace(stderr.String()))
		}
		return nil, fmt.Errorf("%s is unset and scripts/pg-start.sh failed: %v: %s", EnvURL, err, strings.TrimSpace(stderr.String()))
	}
	vars := map[string]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if ok {
			vars[k] = strings.Trim(v, "'")
		}
	}
	serverURL = vars[EnvURL]
	dir := vars["AUTOMATOR_TEST_PGDIR"]
	if serverURL == "" || dir == "" {
		return nil, fmt.Errorf("scripts/pg-start.sh printed no %s and AUTOMATOR_TEST_PGDIR: %q", EnvURL, stdout.String())
	}
	// Processes the tests start (automator replicas) find it here too.
	os.Setenv(EnvURL, serverURL)
	return func() {
		if out, err := exec.Command(filepath.Join(root, "scripts", "pg-stop.sh"), dir).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the throwaway PostgreSQL: %v: %s\n", err, out)
		}
	}, nil
}

// repoRoot is the module root, found from this source file.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("pgtest: cannot locate the repository (runtime.Caller)")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
	if _, err := os.Stat(filepath.Join(root, "scripts", "pg-start.sh")); err != nil {
		return "", fmt.Errorf("pgtest: scripts/pg-start.sh not found from %s: %w", file, err)
	}
	return root, nil
}

// URL returns the server's URL, or ends t: skipped when PostgreSQL is not
// installed (unless EnvRequire is set), failed otherwise.
func URL(t testing.TB) string {
	t.Helper()
	if serverURL != "" {
		return serverURL
	}
	if problem == "" {
		problem = "pgtest.Main did not run: call it from the package's TestMain"
	}
	if noBinary && os.Getenv(EnvRequire) == "" {
		t.Skipf("skipping a PostgreSQL test: %s", problem)
	}
	t.Fatalf("no PostgreSQL for this test: %s", problem)
	return ""
}

// DSN creates a new, empty schema for t and returns a connection string
// whose search_path selects it. The schema is dropped when t ends.
func DSN(t testing.TB) string {
	t.Helper()
	return DSNIn(t, URL(t))
}

// execOn runs one statement on a connection of its own to dsn.
func execOn(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// Exec runs sql on a connection of its own to dsn, failing t if it fails.
func Exec(t testing.TB, dsn, sql string) {
	t.Helper()
	if err := execOn(t.Context(), dsn, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// SchemaDump is every table of dsn's schema with its rows, as text, to
// tell whether anything in it changed.
func SchemaDump(t testing.TB, dsn string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), `SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, table := range tables {
		rows, err := conn.Query(t.Context(), `SELECT t::text FROM `+pgx.Identifier{table}.Sanitize()+` t ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %s\n", table, strings.Join(lines, " "))
	}
	return b.String()
}

// CollatedDatabase creates a new, empty database for t whose default
// collation is the ICU locale icuLocale, a natural language's (the
// throwaway cluster's is C, which compares bytes), and returns its URL; give
// it to DSNIn. It is dropped when t ends. A server that cannot make one
// (before PostgreSQL 15, or built without ICU) skips t.
func CollatedDatabase(t testing.TB, icuLocale string) string {
	t.Helper()
	base := URL(t)
	name := "t_" + randomHex(8)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", EnvURL, err)
	}
	u.Path = "/" + name
	dbURL := u.String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = execOn(ctx, base, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C' LOCALE_PROVIDER icu ICU_LOCALE '%s'`,
		name, strings.ReplaceAll(icuLocale, "'", "''")))
	if code := pgCode(err); code == "42601" || code == "0A000" {
		// A syntax error (no LOCALE_PROVIDER before PostgreSQL 15) or a
		// feature not supported (no ICU).
		t.Skipf("skipping: %s cannot make a database with the ICU collation %s: %v", Redacted(base), icuLocale, err)
	}
	if err != nil {
		t.Fatalf("creating database %s with the ICU collation %s on %s: %v", name, icuLocale, Redacted(base), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		closeAdminPools(dbURL) // DROP ... WITH (FORCE) would end its connections
		if err := execOn(ctx, base, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	return dbURL
}

// pgCode is the SQLSTATE of err, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// DSNIn is DSN in the database db names (a URL: the server's, or one of
// CollatedDatabase).
func DSNIn(t testing.TB, db string) string {
	t.Helper()
	base := db
	schema := "t_" + randomHex(8)
	exec := func(ctx context.Context, sql string) error {
		p, err := adminPool(base)
		if err == nil {
			_, err = p.Exec(ctx, sql)
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema %s on %s: %v", schema, Redacted(base), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return WithSchema(t, base, schema)
}

// WithSchema returns dsn with its search_path set to schema.
func WithSchema(t testing.TB, dsn, schema string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Redacted is u without its password.
func Redacted(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// LockWorkRow holds the row of unit id in the work table of dsn's schema
// locked from a session of its own, as a session in the middle of changing
// it does (a replica cut off before its batch's Sync), until release is
// called or the test ends.
func LockWorkRow(t testing.TB, dsn, id string) (release func()) {
	t.Helper()
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := holder.Begin(ctx)
	if err != nil {
		holder.Close(ctx)
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE work SET reason = 'being completed' WHERE id = $1`, id); err != nil {
		holder.Close(ctx)
		t.Fatal(err)
	}
	release = func() {
		_ = tx.Rollback(ctx)
		holder.Close(ctx)
	}
	t.Cleanup(release)
	return release
}
