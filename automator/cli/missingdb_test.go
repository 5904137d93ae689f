package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
)

// TestACommandRefusesAMissingDatabase: once init has made the SQLite
// database, a command that finds it missing (a disk not mounted, a data
// directory copied without it) says so and makes no empty one in its
// place: serve would otherwise answer every proxy and caller from an empty
// database, and account create would put an account where no automator
// looks for it.
func TestACommandRefusesAMissingDatabase(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	db := filepath.Join(dir, config.FileDB)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(db + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
		{"account", "create", "acme", "--data-dir", dir},
		{"apikey", "list", "--data-dir", dir},
	} {
		// Bounded: serving an empty database instead would not return.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var out, errb bytes.Buffer
		code := Main(ctx, args, Env{Stdout: &out, Stderr: &errb})
		cancel()
		stdout, stderr := out.String(), errb.String()
		if code != ExitError || !strings.Contains(stderr, db+" is missing") {
			t.Errorf("%s with its database missing: exit %d, stdout %q, stderr %q; want exit %d saying it is missing", args[0], code, stdout, stderr, ExitError)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Fatalf("%s with its database missing made one (%v): want none made", args[0], err)
		}
	}
}

// TestServeWithADBFlagNamingNoFileSaysSo: `serve --db` naming a SQLite
// file that does not exist is refused as a missing database, the reason
// saying that --db (or db in automator.yaml) may name the wrong file, not
// only that init's database was moved.
func TestServeWithADBFlagNamingNoFileSaysSo(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := Main(ctx, []string{"serve", "--data-dir", dir, "--db", "other.db", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, Env{Stdout: &out, Stderr: &errb})
	other := filepath.Join(dir, "other.db")
	if code != ExitError || !strings.Contains(errb.String(), other+" is missing") || !strings.Contains(errb.String(), "--db") {
		t.Errorf("serve --db other.db: exit %d, stderr %q; want exit %d saying %s is missing and naming --db", code, errb.String(), ExitError, other)
	}
	for _, made := range []string{other, other + "-serve.lock"} {
		if _, err := os.Stat(made); !os.IsNotExist(err) {
			t.Errorf("serve --db other.db made %s (%v): want nothing made", filepath.Base(made), err)
		}
	}
}
