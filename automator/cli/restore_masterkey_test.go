package cli

import (
	"bytes"
	"os"
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

// TestRestoreRefusesABackupOfAnotherAutomatorWithNoAccount: a backup of
// another automator that holds no account (a fresh one, a staging one),
// which no account key tells apart, is refused by its API keys: it shares
// none with the database it would replace (a review: it was restored, its
// admin key with it, and every exec with --data-dir was refused). A
// backup of this automator with no account is restored, as is the other
// one once the database is moved aside (nothing then to compare with).
func TestRestoreRefusesABackupOfAnotherAutomatorWithNoAccount(t *testing.T) {
	t.Parallel()
	dir, other := initDir(t), initDir(t)
	otherFile, ownFile := filepath.Join(t.TempDir(), "other.db"), filepath.Join(t.TempDir(), "own.db")
	for d, f := range map[string]string{other: otherFile, dir: ownFile} {
		if code, _, stderr := runCLI(t, "backup", "--data-dir", d, f); code != 0 {
			t.Fatalf("backup: exit %d: %s", code, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create: exit %d: %s", code, stderr)
	}
	cfg, _ := config.Load(dir)
	dbPath := cfg.DBPath(dir)
	before := fileBytes(t, dbPath)
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, otherFile)
	if want := "it is not a backup of this automator's database but of another's"; code != ExitError || !strings.Contains(stderr, want) || stdout != "" {
		t.Errorf("restore of another automator's backup with no account: exit %d, stdout %q, stderr %q; want %d and %q",
			code, stdout, stderr, ExitError, want)
	}
	if !bytes.Equal(fileBytes(t, dbPath), before) {
		t.Errorf("a refused restore changed the database")
	}
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, ownFile); code != 0 {
		t.Errorf("restore of this automator's backup, taken before its first account: exit %d: %s", code, stderr)
	}
	if err := os.Rename(dbPath, dbPath+".moved"); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, otherFile); code != 0 {
		t.Errorf("restore of the other backup with the database moved aside: exit %d: %s", code, stderr)
	}
}
