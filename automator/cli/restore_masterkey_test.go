package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestRestoreRefusesABackupOfAnotherMasterKey: a backup of another
// automator, whose account keys this data directory's master.key does not
// open, is refused before anything changes: restored, it would leave a
// data directory that serve refuses ("opens none of the account keys").
func TestRestoreRefusesABackupOfAnotherMasterKey(t *testing.T) {
	t.Parallel()
	dir, other := initDir(t), initDir(t)
	for _, d := range []string{dir, other} {
		if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", d); code != 0 {
			t.Fatalf("account create: exit %d: %s", code, stderr)
		}
	}
	file := filepath.Join(t.TempDir(), "other.db")
	if code, _, stderr := runCLI(t, "backup", "--data-dir", other, file); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	cfg, _ := config.Load(dir)
	dbPath := cfg.DBPath(dir)
	before := fileBytes(t, dbPath)
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != ExitError || !strings.Contains(stderr, config.FileMasterKey) || stdout != "" {
		t.Errorf("restore of another automator's backup: exit %d, stdout %q, stderr %q; want %d and one line naming %s",
			code, stdout, stderr, ExitError, config.FileMasterKey)
	}
	if !bytes.Equal(fileBytes(t, dbPath), before) {
		t.Errorf("a refused restore changed the database")
	}
	if matches, _ := filepath.Glob(dbPath + ".*"); len(matches) != 0 {
		t.Errorf("a refused restore left %v", matches)
	}
}
