//go:build linux

package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
)

// TestACommandWithoutDBIsRefusedWhileServeRunsOnAnother: while a serve
// given --db runs (serving.yaml names its database), a command that opens
// the database without --db, which would open automator.yaml's, is
// refused, saying to give serve's --db; with it, it runs. exec's hint for
// an unknown account says so too. A --db naming automator.yaml's own
// database by another spelling is no other database.
func TestACommandWithoutDBIsRefusedWhileServeRunsOnAnother(t *testing.T) {
	t.Parallel()
	t.Run("another database", func(t *testing.T) {
		t.Parallel()
		dir := initDir(t)
		mine := filepath.Join(dir, config.FileDB)
		other := filepath.Join(t.TempDir(), "other.db")
		if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, other); code != 0 {
			t.Fatalf("backup into other.db: exit %d: %s", code, stderr)
		}
		serveDirInProcess(t, dir, "--db", "sqlite:"+other)
		before := auditCounts(t, mine)
		for _, args := range [][]string{
			{"account", "create", "acme"},
			{"apikey", "create", "ci", "--all-accounts"},
			{"apikey", "list"},
			{"account", "list"},
			{"audit"},
			{"backup", filepath.Join(t.TempDir(), "b.db")},
		} {
			code, stdout, stderr := runCLI(t, append(args, "--data-dir", dir)...)
			if code != ExitError || !strings.Contains(stderr, other) || !strings.Contains(stderr, "--db") {
				t.Errorf("%s without --db under a serve given --db: exit %d, stdout %q, stderr %q; want exit %d naming serve's database and --db", strings.Join(args, " "), code, stdout, stderr, ExitError)
			}
		}
		if after := auditCounts(t, mine); len(after) != len(before) || after[store.AuditAccountCreated] != 0 || after[store.AuditAPIKeyCreated] != before[store.AuditAPIKeyCreated] {
			t.Errorf("automator.yaml's database after the refused commands: audit events %v, want %v as before", after, before)
		}
		if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir, "--db", "sqlite:"+other); code != 0 {
			t.Errorf("account create with serve's --db: exit %d: %s", code, stderr)
		}
		code, _, stderr := runCLI(t, "exec", "--data-dir", dir, "--account", "globex", "@ping")
		if code != ExitError || !strings.Contains(stderr, "automator account list --data-dir") || !strings.Contains(stderr, "--db") {
			t.Errorf("exec to an unknown account under a serve given --db: exit %d, stderr %q; want the account list hint to say to give serve's --db", code, stderr)
		}
		if code, _, stderr := runCLI(t, "apikey", "revoke", "admin", "--data-dir", dir, "--db", "sqlite:"+other); code != 0 {
			t.Fatalf("apikey revoke admin --db: exit %d: %s", code, stderr)
		}
		code, _, stderr = runCLI(t, "exec", "--data-dir", dir, "--account", "acme", "@ping")
		if code != ExitError || !strings.Contains(stderr, "automator apikey create admin") || !strings.Contains(stderr, "--db") {
			t.Errorf("exec with admin.apikey revoked under a serve given --db: exit %d, stderr %q; want the apikey create hint to say to give serve's --db", code, stderr)
		}
	})
	t.Run("its own database spelt otherwise", func(t *testing.T) {
		t.Parallel()
		dir := initDir(t)
		serveDirInProcess(t, dir, "--db", "sqlite:"+filepath.Join(dir, ".", config.FileDB))
		if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
			t.Errorf("account create without --db under a serve given its own database as --db: exit %d: %s", code, stderr)
		}
		code, _, stderr := runCLI(t, "exec", "--data-dir", dir, "--account", "globex", "@ping")
		if code != ExitError || strings.Contains(stderr, "--db") {
			t.Errorf("exec to an unknown account: exit %d, stderr %q; want a hint without --db", code, stderr)
		}
	})
}
