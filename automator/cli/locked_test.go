package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/sqlitetest"
)

// TestCommandsWhileAnotherProgramHoldsTheDatabaseLocked: with a sqlite3
// shell's write transaction open on the database, a command that only
// reads answers, and one that writes fails after its wait saying what holds
// it up and what to do (a review: each failed with "migrating schema:
// database is locked (5) (SQLITE_BUSY)").
func TestCommandsWhileAnotherProgramHoldsTheDatabaseLocked(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	sqlitetest.Lock(t, filepath.Join(dir, config.FileDB))
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"account", "list", "--data-dir", dir}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Errorf("account list while the database is locked: exit %d, %s; want it answered", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	code := Main(t.Context(), []string{"apikey", "create", "ci", "--all-accounts", "--data-dir", dir}, Env{Stdout: &out, Stderr: &errb})
	if code != ExitError || !strings.Contains(errb.String(), "another program holds the database locked") || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("apikey create while the database is locked: exit %d, stderr %q; want %d and one line saying another program holds it locked", code, errb.String(), ExitError)
	}
}
