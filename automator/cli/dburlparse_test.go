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

// TestAPostgreSQLURLThatDoesNotParseIsRefusedWithoutItsPassword: a
// postgres:// URL whose password holds a character it must percent-encode,
// given to --db or as db in automator.yaml, is refused by every command as
// a URL that does not parse, its password nowhere in the message (serve's
// goes to the service's log), and nothing is made: it is not taken for a
// SQLite file path named after the URL, refused as missing with the
// password in its name.
func TestAPostgreSQLURLThatDoesNotParseIsRefusedWithoutItsPassword(t *testing.T) {
	t.Parallel()
	const secret = "S3cr%t!pw"
	const dsn = "postgres://opsgate:" + secret + "@127.0.0.1:1/automator"
	root := t.TempDir()
	run := func(args ...string) (int, string) {
		t.Helper()
		// Bounded: serving instead would not return.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		code := Main(ctx, args, Env{Stdout: &out, Stderr: &errb})
		return code, out.String() + errb.String()
	}
	check := func(what string, code int, out string) {
		t.Helper()
		if code != ExitError || !strings.Contains(out, "db: the postgres:// URL does not parse") {
			t.Errorf("%s: exit %d, output %q; want exit %d saying the URL does not parse", what, code, out, ExitError)
		}
		if strings.Contains(out, "S3cr") {
			t.Errorf("%s: output %q shows the password", what, out)
		}
	}

	fresh := filepath.Join(root, "fresh")
	code, out := run("init", "--data-dir", fresh, "--db", dsn)
	check("init --db", code, out)
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("init --db with a URL that does not parse made %s (%v): want nothing made", fresh, err)
	}

	dir := initDir(t)
	for _, args := range [][]string{
		{"serve", "--data-dir", dir, "--db", dsn, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
		{"account", "create", "acme", "--data-dir", dir, "--db", dsn},
		{"account", "list", "--data-dir", dir, "--db", dsn},
		{"apikey", "list", "--data-dir", dir, "--db", dsn},
	} {
		code, out := run(args...)
		check(strings.Join(args[:2], " ")+" --db", code, out)
	}

	// The same URL as db in automator.yaml.
	path := filepath.Join(dir, config.FileConfig)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), "db: automator.db", "db: "+dsn, 1))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
		{"account", "list", "--data-dir", dir},
	} {
		code, out := run(args...)
		check(strings.Join(args[:2], " ")+" with db in automator.yaml", code, out)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "postgres") {
			t.Errorf("a command made %s in the data directory: want nothing named after the URL", e.Name())
		}
	}
}
