package cli

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/sqlitetest"
	"github.com/opsgate/opsgate/internal/waittest"
)

func TestDefaultReplicaIDIsStablePerDataDirectory(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	first := defaultReplicaID(a)
	if again := defaultReplicaID(a); again != first {
		t.Errorf("two calls for one directory gave %q and %q", first, again)
	}
	t.Chdir(root)
	if defaultReplicaID("a") != defaultReplicaID(a) {
		t.Errorf("a relative and an absolute path of one directory differ: %q, %q", defaultReplicaID("a"), defaultReplicaID(a))
	}
	if defaultReplicaID(a) == defaultReplicaID(b) {
		t.Errorf("two data directories on one host share the id %q", defaultReplicaID(a))
	}
}

// initDir makes a data directory with the default (SQLite) store.
func initDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443"}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errb.String())
	}
	return dir
}

func replicasCLI(t *testing.T, dir string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"replicas", "--data-dir", dir}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("replicas: exit %d: %s", code, errb.String())
	}
	return out.String()
}

func TestReplicasListsHeartbeatsAndWhoIsAlive(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if out := replicasCLI(t, dir); !strings.Contains(out, "no replica") {
		t.Errorf("replicas before any heartbeat printed %q, want it to say there is none", out)
	}

	st, _ := openDirStore(t, dir)
	defer st.Close()
	now := time.Now()
	// One replica beating now (the loop), one that stopped a minute ago.
	if err := st.ReplicaHeartbeat(t.Context(), store.ReplicaHeartbeatParams{
		ReplicaID: "gone", Hostname: "old-host", Version: "v0.9", StartedAt: now.Add(-time.Hour), Now: now.Add(-time.Minute),
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := startHeartbeat(ctx, st, "live", func(string, error, ...any) {}, slog.New(slog.DiscardHandler))
	// The first heartbeat is recorded before startHeartbeat returns.
	out := replicasCLI(t, dir)
	cancel()
	waittest.Recv(t, done, "the heartbeat loop to return after its context was cancelled")

	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		rows[f[0]] = f
	}
	if f := rows["live"]; len(f) == 0 || f[len(f)-1] != "yes" {
		t.Errorf("replica live: row %q, want it alive (yes); the table:\n%s", f, out)
	}
	if f := rows["gone"]; len(f) == 0 || f[len(f)-1] != "no" || f[1] != "old-host" || f[2] != "v0.9" {
		t.Errorf("replica gone: row %q, want old-host v0.9 ... no; the table:\n%s", f, out)
	}
	if !strings.HasPrefix(out, "REPLICA ID") || !strings.Contains(out, "LAST SEEN") {
		t.Errorf("the table has no header:\n%s", out)
	}
}

// heartbeatStore fails ReplicaHeartbeat while down is set.
type heartbeatStore struct {
	store.Store
	down bool
}

func (s *heartbeatStore) ReplicaHeartbeat(context.Context, store.ReplicaHeartbeatParams) error {
	if s.down {
		return store.ErrUnavailable
	}
	return nil
}

// TestAFailingHeartbeatIsLoggedOncePerChange: with the database out of
// reach every heartbeat fails; the log warns once, not every 5 seconds,
// and says once when a heartbeat is recorded again.
func TestAFailingHeartbeatIsLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	st := &heartbeatStore{down: true}
	beat := heartbeat(t.Context(), st, store.ReplicaHeartbeatParams{ReplicaID: "a"}, func(doing string, err error, _ ...any) {
		t.Errorf("%s: %v told as a fault of its own; want it warned of", doing, err)
	}, slog.New(slog.NewTextHandler(&log, nil)))
	for range 4 {
		beat()
	}
	st.down = false
	beat()
	beat()
	if n := strings.Count(log.String(), "level=WARN"); n != 1 {
		t.Errorf("warnings over 4 failed heartbeats: %d; want 1:\n%s", n, log.String())
	}
	if n := strings.Count(log.String(), "heartbeat again"); n != 1 {
		t.Errorf("lines saying heartbeats are recorded again: %d; want 1:\n%s", n, log.String())
	}
}

// TestServesOwnWritesOnALockedDatabaseAreToldAsSuch: the heartbeat's and
// the hourly purges' writes that find the database locked by another
// program are told to serve's log of its own store failures
// (server.Server.LogStoreFailure), whose lines say what to do within the
// lock's bound, not logged as bare errors (a review).
func TestServesOwnWritesOnALockedDatabaseAreToldAsSuch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "automator.db")
	st, err := sqlitestore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sqlitetest.Lock(t, path)
	var mu sync.Mutex
	var told []string
	failed := func(doing string, err error, _ ...any) {
		mu.Lock()
		defer mu.Unlock()
		if store.IsLocked(err) {
			told = append(told, doing)
		}
	}
	var log logtest.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	var wg sync.WaitGroup
	wg.Go(func() { heartbeat(t.Context(), st, store.ReplicaHeartbeatParams{ReplicaID: "a"}, failed, logger)() })
	wg.Go(func() { forgetReplicas(t.Context(), st, time.Now(), failed, logger) })
	wg.Go(func() { forgetInstances(t.Context(), st, time.Now(), failed, logger) })
	wg.Wait()
	if len(told) != 3 {
		t.Errorf("writes told as finding the database locked: %q; want the heartbeat's and both purges'", told)
	}
	if s := log.String(); s != "" {
		t.Errorf("logged besides:\n%s", s)
	}
}
