package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestRestoreOfALinkedDatabaseRestoresWhereTheLinkLeads: a database file
// that is a symbolic link (to another volume, say) is restored where the
// link leads, the replaced database set aside there, and the link stays.
// It used to be replaced, in the data directory, by a file of its own.
func TestRestoreOfALinkedDatabaseRestoresWhereTheLinkLeads(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.DBPath(dir)
	volume := t.TempDir()
	real := filepath.Join(volume, "automator.db")
	if err := os.Rename(db, real); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, db); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, file); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if fi, err := os.Lstat(db); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s after restore: %v, %v; want the link left", db, fi, err)
	}
	if aside, _ := filepath.Glob(real + ".before-restore-*"); len(aside) != 1 {
		t.Errorf("the replaced database set aside beside %s: %v; want one", real, aside)
	}
	if code, stdout, stderr := runCLI(t, "account", "list", "--data-dir", dir); code != 0 || !strings.Contains(stdout, "acme") {
		t.Errorf("account list after restore: exit %d, %q, %s; want the backup's account", code, stdout, stderr)
	}
}
