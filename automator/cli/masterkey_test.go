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

// TestAnotherDatabasesMasterKeyIsRefused: a data directory whose master.key
// is not the one its accounts were made with (copied from another) makes
// `serve` and `account create` stop at once with one message naming the
// file, instead of serving calls that all fail or sealing new keys that
// would not open. With its own master.key back, both work.
func TestAnotherDatabasesMasterKeyIsRefused(t *testing.T) {
	t.Parallel()
	dir, other := initDir(t), initDir(t)
	cli := func(ctx context.Context, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(ctx, append(args, "--data-dir", dir), Env{Stdout: &out, Stderr: &errb})
		return code, out.String() + errb.String()
	}
	if code, out := cli(t.Context(), "account", "create", "acme"); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, out)
	}
	own, err := os.ReadFile(filepath.Join(dir, config.FileMasterKey))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := os.ReadFile(filepath.Join(other, config.FileMasterKey))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.FileMasterKey), foreign, 0o600); err != nil {
		t.Fatal(err)
	}

	want := "the master key in " + filepath.Join(dir, config.FileMasterKey) + " opens none of the 1 account keys in " +
		filepath.Join(dir, "automator.db") + " (acme): it is not the master key of this database"
	// Were serve to start, it would run until this context ends, and exit 0.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if code, out := cli(ctx, "serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"); code != ExitError || !strings.Contains(out, want) {
		t.Errorf("serve with another database's master key: exit %d: %s; want exit %d saying %q", code, out, ExitError, want)
	}
	if code, out := cli(t.Context(), "account", "create", "beta"); code != ExitError || !strings.Contains(out, want) {
		t.Errorf("account create with another database's master key: exit %d: %s; want exit %d saying %q", code, out, ExitError, want)
	}
	if code, out := cli(t.Context(), "account", "list"); code != 0 || strings.Contains(out, "beta") {
		t.Errorf("account list after the refused create: exit %d:\n%s; want acme alone", code, out)
	}

	if err := os.WriteFile(filepath.Join(dir, config.FileMasterKey), own, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := cli(t.Context(), "account", "create", "beta"); code != 0 {
		t.Errorf("account create with the database's own master key: exit %d: %s", code, out)
	}
}
