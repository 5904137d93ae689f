package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/storetest"
	"github.com/opsgate/opsgate/internal/sqlitetest"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runEnqueueChild(path))
	}
	goleak.VerifyTestMain(m)
}

// open opens a store for t and closes it when t ends.
func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "automator.db"))
	})
}

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC)

func TestReopenKeepsDataAndSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "automator.db")

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatalf("AccountCreate: %v", err)
	}
	if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-1", Account: "acme", SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour)}); err != nil {
		t.Fatalf("WorkEnqueue: %v", err)
	}
	claimed, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-1", Max: 1, ClaimIDs: []string{"claim-1"}, Now: testNow.Add(time.Second)})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("WorkClaim = %v, %v", claimed, err)
	}
	before := migrationRows(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s = open(t, path)
	if _, err := s.AccountGet(ctx, "acme"); err != nil {
		t.Errorf("AccountGet after reopening: %v", err)
	}
	w, err := s.WorkGet(ctx, "w-1")
	if err != nil {
		t.Fatalf("WorkGet after reopening: %v", err)
	}
	if w.State != store.StateClaimed || w.ClaimID != "claim-1" || w.InstanceID != "i-1" {
		t.Errorf("after reopening: %s by %q under %q, want claimed by i-1 under claim-1", w.State, w.InstanceID, w.ClaimID)
	}
	// Nanoseconds survive too: times are stored as unix nanoseconds.
	if !w.QueuedAt.Equal(testNow) {
		t.Errorf("QueuedAt after reopening = %v, want %v", w.QueuedAt, testNow)
	}

	after := migrationRows(t, s)
	if len(after) != len(migrations) {
		t.Errorf("schema_migrations holds %d rows after reopening, want %d", len(after), len(migrations))
	}
	for v, appliedAt := range before {
		if after[v] != appliedAt {
			t.Errorf("migration %d: applied_at %d after reopening, was %d: applied twice", v, after[v], appliedAt)
		}
	}
}

// migrationRows returns schema_migrations as version → applied_at.
func migrationRows(t *testing.T, s *Store) map[int]int64 {
	t.Helper()
	rows, err := s.read.QueryContext(t.Context(), `SELECT version, applied_at FROM schema_migrations`)
	if err != nil {
		t.Fatalf("reading schema_migrations: %v", err)
	}
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var v int
		var at int64
		if err := rows.Scan(&v, &at); err != nil {
			t.Fatalf("reading schema_migrations: %v", err)
		}
		out[v] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading schema_migrations: %v", err)
	}
	return out
}

func TestMigrationsAreOrdered(t *testing.T) {
	t.Parallel()
	for i, m := range migrations {
		if m.version != i+1 {
			t.Errorf("migrations[%d] has version %d, want %d: versions count up from 1 without gaps", i, m.version, i+1)
		}
		if m.name == "" || strings.TrimSpace(m.sql) == "" {
			t.Errorf("migration %d has no name or no SQL", m.version)
		}
	}
}

func TestOpenRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "automator.db")
	s := open(t, path)
	if err := s.writeTx(t.Context(), func(ctx context.Context, tx querier) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)`)
		return err
	}); err != nil {
		t.Fatalf("inserting a future version: %v", err)
	}
	s.Close()

	_, err := Open(t.Context(), path)
	if err == nil || !strings.Contains(err.Error(), "999") || !strings.Contains(err.Error(), path) {
		t.Errorf("Open of a database from the future: error = %v, want one naming the path and version 999", err)
	}
	// Said so while another program holds the database locked too (a
	// review: it said "database is locked", after 5 s).
	sqlitetest.Lock(t, path)
	_, err = Open(t.Context(), path)
	if err == nil || !strings.Contains(err.Error(), "is at version 999, newer than this binary knows") {
		t.Errorf("Open of a database from the future, locked by another program: error = %v, want one saying it is newer than this binary knows", err)
	}
}

// TestPingStaysReadyWhenANewerBinaryMigratesAhead: a newer automator (its
// CLI, say) may migrate the file while this one serves; migrations only
// add, so Ping, behind /readyz, still answers ready on a schema newer than
// it knows. One older than it needs is not ready.
func TestPingStaysReadyWhenANewerBinaryMigratesAhead(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	latest := migrations[len(migrations)-1].version
	exec := func(q string, args ...any) {
		t.Helper()
		if err := s.writeTx(t.Context(), func(ctx context.Context, tx querier) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		}); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0)`, latest+1)
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping on a schema one version ahead: %v, want nil", err)
	}
	exec(`DELETE FROM schema_migrations WHERE version >= ?`, latest)
	if err := s.Ping(t.Context()); !errors.As(err, new(*store.SchemaBehindError)) {
		t.Errorf("Ping on a schema one version behind: %v, want a *store.SchemaBehindError (/readyz's log tells it from a store that does not answer)", err)
	}
}

func TestOpenInAMissingDirectoryFailsClearly(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "missing")
	path := filepath.Join(dir, "automator.db")
	s, err := Open(t.Context(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open in a missing directory succeeded")
	}
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Open in a missing directory: error = %v, want fs.ErrNotExist naming the path and saying the directory does not exist", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open created %s: %v", dir, err)
	}
}

// TestOpenOfADirectoryOrADeviceSaysWhatItIs: SQLite says only "unable to
// open database file" of a directory; a device would be opened.
func TestOpenOfADirectoryOrADeviceSaysWhatItIs(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "automator.db")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		dir:        "it is a directory; give the path of a database file",
		os.DevNull: "it is a device, a pipe or a socket, not a file",
	} {
		s, err := Open(t.Context(), path)
		if err == nil {
			s.Close()
			t.Errorf("Open(%s) succeeded", path)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Open(%s): %v, want it named and %q", path, err, want)
		}
		// What commands read before they open it, and repair, say so too
		// (repair called a directory damaged).
		if _, _, err := SchemaVersion(t.Context(), path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SchemaVersion(%s): %v, want %q", path, err, want)
		}
		dst := filepath.Join(t.TempDir(), "rebuilt.db")
		if _, err := Rebuild(t.Context(), path, dst, path, RebuildOptions{}); err == nil || !strings.Contains(err.Error(), want) || store.IsDamaged(err) {
			t.Errorf("Rebuild(%s): %v, want %q, not damage", path, err, want)
		}
	}
}

// TestEveryConnectionHasTheDurabilityPragmas holds every pooled connection at
// once, so a pragma applied to only the first one would show.
func TestEveryConnectionHasTheDurabilityPragmas(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	ctx := t.Context()
	want := map[string]string{
		"journal_mode": "wal",
		"synchronous":  "2", // FULL
		"foreign_keys": "1",
		"busy_timeout": "5000",
	}
	check := func(pool string, i int, q querier, extra map[string]string) error {
		all := maps.Clone(want)
		maps.Copy(all, extra)
		for pragma, v := range all {
			var got string
			if err := q.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
				return fmt.Errorf("%s pool conn %d: PRAGMA %s: %w", pool, i, pragma, err)
			}
			if got != v {
				t.Errorf("%s pool conn %d: %s = %s, want %s", pool, i, pragma, got, v)
			}
		}
		return nil
	}
	// The write pool's one connection belongs to the writer.
	if err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		return check("write", 0, tx, map[string]string{"query_only": "0", "temp_store": "2"}) // MEMORY
	}); err != nil {
		t.Fatal(err)
	}
	var held []*sql.Conn
	for range readConns {
		c, err := s.read.Conn(ctx)
		if err != nil {
			t.Fatalf("read pool: Conn: %v", err)
		}
		held = append(held, c)
	}
	for i, c := range held {
		if err := check("read", i, c, map[string]string{"query_only": "1"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range held {
		c.Close()
	}
}

// TestOpenReadersOpensEveryReadConnection: after OpenReaders the read
// pool's connections are all open, and kept: an automator whose network
// connections took every file descriptor its limit allows could not open
// one later, in a burst of reads, and failed those reads ("unable to open
// database file"). test/e2e's
// TestAnAutomatorOutOfFileDescriptorsSaysSoOnceServesWhatItHoldsAndAcceptsOnceSomeClose
// checks that serve holds them.
func TestOpenReadersOpensEveryReadConnection(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	if err := s.OpenReaders(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := s.read.Stats(); st.OpenConnections != readConns || st.Idle != readConns {
		t.Errorf("read pool after OpenReaders: %d connections open, %d idle; want all %d, idle", st.OpenConnections, st.Idle, readConns)
	}
}

// TestOpenTakesAnyPath: the path becomes an SQLite URI, whose special
// characters must not change which file is opened.
func TestOpenTakesAnyPath(t *testing.T) {
	// Not parallel: it changes the working directory (t.Chdir).
	dir := filepath.Join(t.TempDir(), "a b?c#d%25e&f=g")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "automator.db")
	open(t, path)
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the database is not at %s: %v", path, err)
	}

	t.Chdir(dir)
	s := open(t, "relative.db")
	if s.Path() != "relative.db" {
		t.Errorf("Path() = %q, want relative.db", s.Path())
	}
	if _, err := os.Stat(filepath.Join(dir, "relative.db")); err != nil {
		t.Errorf("a relative path did not open in the working directory: %v", err)
	}
}

// TestANewDatabaseIsItsOwnersAlone: a database Open creates, and the -wal
// and -shm files SQLite makes beside it, are mode 0600 whatever the umask
// lets through (SQLite alone makes them 0644 less the umask); a database
// that was there keeps its mode.
func TestANewDatabaseIsItsOwnersAlone(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no unix permission bits on windows")
	}
	path := filepath.Join(t.TempDir(), "automator.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %04o after Open created it, want 0600", filepath.Base(name), fi.Mode().Perm())
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	open(t, path)
	if fi, err := os.Stat(path); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o640 {
		t.Errorf("an existing database has mode %04o after Open, want the 0640 it had", fi.Mode().Perm())
	}
}

// TestOpenReadsWhileAnotherProgramHoldsTheDatabaseLocked: a database whose
// schema is current is opened without a write transaction, so that while
// another program holds it locked (a sqlite3 shell's BEGIN EXCLUSIVE) the
// commands that only read still work (a review: work list, account list,
// audit and instances each failed after 5 s, "migrating schema: database
// is locked", during the very incident they were run for).
func TestOpenReadsWhileAnotherProgramHoldsTheDatabaseLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "automator.db")
	s := open(t, path)
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), `BEGIN EXCLUSIVE`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), `ROLLBACK`)
	if _, err := conn.ExecContext(t.Context(), `UPDATE accounts SET key_id = key_id`); err != nil {
		t.Fatal(err)
	}
	again, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open while another connection holds the database locked: %v; want it opened for reading", err)
	}
	defer again.Close()
	if accounts, err := again.AccountList(t.Context()); err != nil || len(accounts) != 1 {
		t.Errorf("AccountList while the database is locked: %v, %v; want the one account", accounts, err)
	}
}
