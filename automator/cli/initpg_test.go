//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/crypto"
)

// TestAFailedInitOnPostgreSQLCanBeRunAgain: an init whose data directory
// cannot take its files (an admin.apikey there already) fails before it
// stores the admin API key in the PostgreSQL database, which a failed init
// could not remove again: the database would refuse every later init ("already
// has the admin API key of an earlier `automator init`") although no data
// directory holds that key. With the cause removed, the same init succeeds,
// and its admin.apikey is the key the database holds.
func TestAFailedInitOnPostgreSQLCanBeRunAgain(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	apiKeyPath := filepath.Join(dir, config.FileAPIKey)
	if err := os.WriteFile(apiKeyPath, []byte("stale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443", "--db", dsn}
	code, _, stderr := runMain(t, args...)
	if code != ExitError || !strings.Contains(stderr, "writing "+config.FileAPIKey) || !strings.Contains(stderr, "file exists") {
		t.Fatalf("init over a stale admin.apikey: exit %d, stderr %q; want exit %d saying writing %s: file exists", code, stderr, ExitError, config.FileAPIKey)
	}
	if data, err := os.ReadFile(apiKeyPath); err != nil || string(data) != "stale\n" {
		t.Errorf("the stale admin.apikey after the failed init: %q, %v; want it as it was", data, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the failed init left %d entries in the data directory, want only the stale admin.apikey", len(entries))
	}

	if err := os.Remove(apiKeyPath); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain(t, args...); code != 0 {
		t.Fatalf("the same init with the stale admin.apikey removed: exit %d: %s", code, stderr)
	}
	secret, err := os.ReadFile(apiKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := openDirStore(t, dir)
	defer st.Close()
	if k, err := st.APIKeyGetByHash(t.Context(), crypto.HashToken(strings.TrimSpace(string(secret)))); err != nil || k.ID != "admin" {
		t.Errorf("the database's key for admin.apikey: %+v, %v; want the admin key", k, err)
	}
	if _, err := os.Stat(filepath.Join(dir, initDraft)); !os.IsNotExist(err) {
		t.Errorf("init left %s behind (%v)", initDraft, err)
	}
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Errorf("account create in the data directory made on the second try: exit %d: %s", code, stderr)
	}
}
