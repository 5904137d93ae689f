//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestAnInitThatStoredTheKeyKeepsItsFilesWhenItsConfigCannotBePutInPlace:
// once init has stored the admin API key in the database, a failure to
// put automator.yaml in place (here a directory in its way, made while
// init waits on the database) does not remove admin.apikey, nor the draft
// automator.yaml in .init: the database holds that key for good, and no
// later init on it would make another. The error says how to finish the
// data directory, and doing so gives one that works with that key.
//
// The test holds the api_keys table locked while init runs, so that init
// cannot store the key before the directory is in the way: init writes the
// draft after it checks that automator.yaml is absent, and stores the key
// only once the test lets it.
func TestAnInitThatStoredTheKeyKeepsItsFilesWhenItsConfigCannotBePutInPlace(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	st, err := pgstore.Open(ctx, dsn) // the schema, to lock its table
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := runMain(t, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443", "--db", dsn)
		done <- result{code, stderr}
	}()
	draftConfig := filepath.Join(dir, initDraft, config.FileConfig)
	waittest.Until(t, "init to write its draft "+config.FileConfig, func() bool {
		_, err := os.Stat(draftConfig)
		return err == nil
	})
	blocker := filepath.Join(dir, config.FileConfig)
	if err := os.Mkdir(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(blocker, "in-the-way"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := waittest.Recv(t, done, "init to end")

	apiKeyPath := filepath.Join(dir, config.FileAPIKey)
	if r.code != ExitError || !strings.Contains(r.stderr, "putting "+config.FileConfig+" in place") ||
		!strings.Contains(r.stderr, "move "+draftConfig+" to "+blocker) {
		t.Errorf("init whose %s cannot be put in place: exit %d, stderr %q; want exit %d saying to move %s to %s", config.FileConfig, r.code, r.stderr, ExitError, draftConfig, blocker)
	}
	secret, err := os.ReadFile(apiKeyPath)
	if err != nil {
		t.Fatalf("the admin key's file after init stored the key: %v, want it kept", err)
	}
	if _, err := os.Stat(draftConfig); err != nil {
		t.Fatalf("the draft %s after init stored the key: %v, want it kept", config.FileConfig, err)
	}

	// Finished as the error says, the data directory works with that key.
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(draftConfig, blocker); err != nil {
		t.Fatal(err)
	}
	ds, _ := openDirStore(t, dir)
	defer ds.Close()
	k, err := ds.APIKeyGetByHash(t.Context(), crypto.HashToken(strings.TrimSpace(string(secret))))
	if err != nil || k.ID != "admin" {
		t.Errorf("the database's key for the kept admin.apikey: %+v, %v; want the admin key", k, err)
	}
	if err == nil && k.ID == "admin" {
		if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
			t.Errorf("account create in the finished data directory: exit %d: %s", code, stderr)
		}
	}
}
