//go:build linux

package replicas

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestCommandsTakeTheDBTheirReplicaServes: a replica whose data directory
// names SQLite and whose serve is given --db postgres://… (a systemd unit's
// ExecStart, say). `account create` without --db, which would make the
// account in the SQLite file no replica serves, is refused, naming the
// database serve runs on without its password; with the same --db it makes
// the account in PostgreSQL, where `apikey create` finds it.
func TestCommandsTakeTheDBTheirReplicaServes(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	dir := filepath.Join(t.TempDir(), "a")
	if code, out, errOut := run(bin.automator, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443"); code != 0 {
		t.Fatalf("automator init: exit %d\n%s%s", code, out, errOut)
	}
	r := &replica{ID: "m0", DataDir: dir, GRPCAddr: "127.0.0.1:0"}
	r.proc = startProc(t, "automator-"+r.ID, bin.automator, "serve", "--data-dir", dir,
		"--listen", r.GRPCAddr, "--http-listen", "127.0.0.1:0", "--db", dsn, "--replica-id", r.ID)
	if err := r.waitServing(); err != nil {
		t.Fatalf("replica %s: %v", r.ID, err)
	}

	code, _, errOut := run(bin.automator, "account", "create", "acme", "--data-dir", dir)
	if code != 255 || !strings.Contains(errOut, pgstore.Redact(dsn)) || !strings.Contains(errOut, "--db") {
		t.Errorf("account create without --db: exit %d, stderr %q; want 255 naming serve's database %s and --db", code, errOut, pgstore.Redact(dsn))
	}
	if strings.Contains(errOut, dsn) {
		t.Errorf("account create without --db: stderr %q shows the URL with its password", errOut)
	}
	if code, _, errOut := run(bin.automator, "account", "create", "acme", "--data-dir", dir, "--db", dsn); code != 0 {
		t.Fatalf("account create --db: exit %d: %s", code, errOut)
	}
	if code, _, errOut := run(bin.automator, "apikey", "create", "ci", "--accounts", "acme", "--data-dir", dir, "--db", dsn); code != 0 {
		t.Errorf("apikey create --accounts acme --db: exit %d: %s", code, errOut)
	}
	if code, out, errOut := run(bin.automator, "account", "list", "--data-dir", dir, "--db", dsn); code != 0 || !strings.Contains(out, "acme") {
		t.Errorf("account list --db: exit %d, stdout %q, stderr %q; want acme listed", code, out, errOut)
	}
}
