//go:build linux

package replicas

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/proctest"
)

// TestTwoReplicasStartingTogetherMigrateAnEmptyDatabaseOnce starts two
// `automator serve` processes at the same moment on an empty schema (their
// data directories were made with the default SQLite store; --db points them
// at PostgreSQL). Both serve, and schema_migrations records each step once.
func TestTwoReplicasStartingTogetherMigrateAnEmptyDatabaseOnce(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b")}
	if code, out, errOut := run(bin.automator, "init", "--data-dir", dirs[0], "--public-url", "https://127.0.0.1:8443"); code != 0 {
		t.Fatalf("automator init: exit %d\n%s%s", code, out, errOut)
	}
	proctest.CopyDataDir(t, dirs[0], dirs[1])

	var replicas []*replica
	for i, dir := range dirs {
		r := &replica{ID: fmt.Sprintf("m%d", i), DataDir: dir, GRPCAddr: "127.0.0.1:0"}
		replicas = append(replicas, r)
	}
	for _, r := range replicas {
		r.proc = startProc(t, "automator-"+r.ID, bin.automator, "serve", "--data-dir", r.DataDir,
			"--listen", r.GRPCAddr, "--http-listen", "127.0.0.1:0", "--db", dsn, "--replica-id", r.ID)
	}
	for _, r := range replicas {
		if err := r.waitServing(); err != nil {
			t.Fatalf("replica %s: %v", r.ID, err)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY version`)
	if err != nil {
		t.Fatalf("reading schema_migrations: %v", err)
	}
	type row struct{ version, n int }
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.version, &x.n)
	})
	if err != nil {
		t.Fatalf("reading schema_migrations: %v", err)
	}
	if len(got) == 0 {
		t.Fatal("schema_migrations is empty: nothing was migrated")
	}
	for i, r := range got {
		if r.version != i+1 || r.n != 1 {
			t.Errorf("schema_migrations: version %d recorded %d times at position %d; want versions 1..%d once each", r.version, r.n, i, len(got))
		}
	}

	// Both replicas are alive in the listing, whichever one is asked.
	code, out, errOut := run(bin.automator, "replicas", "--data-dir", dirs[1], "--db", dsn)
	if code != 0 {
		t.Fatalf("automator replicas: exit %d: %s", code, errOut)
	}
	for _, r := range replicas {
		if !hasRow(out, r.ID, "yes") {
			t.Errorf("automator replicas does not list %s as alive:\n%s", r.ID, out)
		}
	}
}
