package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// dataFiles reads the database files and the server certificate of a data
// directory, to tell whether a command changed any of them.
func dataFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.DBPath(dir)
	files := map[string][]byte{}
	for _, path := range []string{db, db + "-wal", filepath.Join(dir, config.FileCert), filepath.Join(dir, config.FileKey)} {
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(path)] = data
	}
	return files
}

// TestCommandsAreRefusedDuringARestore: every command that opens the data
// directory's database is refused while a restore holds the directory,
// with one line naming the restore, and changes nothing: a change made to
// the database being replaced would be lost with it.
func TestCommandsAreRefusedDuringARestore(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create: %s", stderr)
	}
	backup := filepath.Join(t.TempDir(), "b.db")
	before := dataFiles(t, dir)

	lock, err := lockForRestore(dir)
	if err != nil {
		t.Fatalf("taking the restore's lock: %v", err)
	}
	want := "a restore of " + dir + " is under way"
	for _, args := range [][]string{
		{"account", "create", "beta"},
		{"account", "rotate-token", "acme"},
		{"account", "rotate-key", "acme"},
		{"account", "delete", "acme"},
		{"account", "list"},
		{"apikey", "create", "ci", "--all-accounts"},
		{"apikey", "list"},
		{"apikey", "revoke", "admin"},
		{"audit"},
		{"cert", "renew"},
		{"instances", "--account", "acme"},
		{"work", "list"},
		{"work", "show", "w-none"},
		{"replicas"},
		// Against PostgreSQL too: the data directory holds its keys.
		{"replicas", "--db", "postgres://automator@db.invalid:5432/automator"},
		{"work", "list", "--db", "postgres://automator@db.invalid:5432/automator"},
		{"backup", backup},
	} {
		args = append(args, "--data-dir", dir)
		code, stdout, stderr := runCLI(t, args...)
		if code != ExitError || !strings.Contains(stderr, want) || !strings.Contains(stderr, "run the command again once the restore has finished") ||
			strings.Count(stderr, "\n") != 1 || stdout != "" {
			t.Errorf("%s during a restore: exit %d, stdout %q, stderr %q; want %d and one line saying %q, to run it again once the restore has finished",
				strings.Join(args, " "), code, stdout, stderr, ExitError, want)
		}
	}
	lock.Release()

	after := dataFiles(t, dir)
	for name, data := range before {
		if !bytes.Equal(after[name], data) {
			t.Errorf("a command refused during the restore changed %s", name)
		}
	}
	if _, err := os.Stat(backup); err == nil {
		t.Errorf("backup refused during the restore wrote %s", backup)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		if _, err := st.AccountGet(t.Context(), "beta"); err == nil {
			t.Errorf("account beta exists: account create was not refused")
		}
		keys, err := st.APIKeyList(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k.ID == "admin" && !k.RevokedAt.IsZero() {
				t.Errorf("API key admin is revoked: apikey revoke was not refused")
			}
			if k.ID != "admin" {
				t.Errorf("API key %s (%s) exists: apikey create was not refused", k.ID, k.Name)
			}
		}
	})
	// Once the restore is over, they run.
	if code, _, stderr := runCLI(t, "apikey", "revoke", "admin", "--data-dir", dir); code != 0 {
		t.Errorf("apikey revoke once the restore released the directory: exit %d: %s", code, stderr)
	}
}

// TestRestoreIsRefusedWhileACommandHasTheDatabaseOpen: a restore started
// while a command has the database open (opened as every command opens
// it) is refused and replaces nothing; once the command closed it, the
// restore runs.
func TestRestoreIsRefusedWhileACommandHasTheDatabaseOpen(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	file := takeBackup(t, dir)
	st, cfg := openDirStore(t, dir)
	if _, err := st.APIKeyList(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"restore", "--data-dir", dir, file}, {"restore", "--data-dir", dir, "--open-work-only"}} {
		code, _, stderr := runCLI(t, args...)
		if code != ExitError || !strings.Contains(stderr, "an automator serve or another command is using "+dir) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s while a command has the database open: exit %d, stderr %q; want %d and one line saying a command is using %s",
				strings.Join(args, " "), code, stderr, ExitError, dir)
		}
	}
	if matches, _ := filepath.Glob(cfg.DBPath(dir) + ".*"); len(matches) != 0 {
		t.Errorf("a refused restore left %v", matches)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, file); code != 0 {
		t.Errorf("restore once the command closed the database: exit %d: %s", code, stderr)
	}
}

// TestTheStoreOfACommandForgetsCredentialsOnDemand: the store openStore
// returns, which holds the serve lock, still lets store.ForgetCredentials
// reach its credential cache (as a server built on it uses it when it
// learns of an account deleted by another process).
func TestTheStoreOfACommandForgetsCredentialsOnDemand(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create: %s", stderr)
	}
	st, _ := openDirStore(t, dir)
	defer st.Close()
	if _, err := st.AccountGet(t.Context(), "acme"); err != nil { // cached from here
		t.Fatal(err)
	}
	withStore(t, dir, func(other *sqlitestore.Store) {
		if _, err := other.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Reason: "test", Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	})
	store.ForgetCredentials(st)
	if a, err := st.AccountGet(t.Context(), "acme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("account acme after another process deleted it and its credentials were forgotten: %q, %v; want not found", a.Name, err)
	}
}

// openDirStore opens the data directory's database as a command does
// (openStore: holding the serve lock, shared) and returns it with the
// directory's settings.
func openDirStore(t *testing.T, dir string) (store.Store, config.Config) {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(t.Context(), dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st, cfg
}
