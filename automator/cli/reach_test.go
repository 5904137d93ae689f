package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/proxy/service"
)

// TestInstallRefusesAUserWhoCannotWriteBesideTheSQLiteDatabase: SQLite
// creates its -wal, -shm and journal files beside the database, and serve
// its lock, so a service user who may write the database file but not its
// directory (outside the data directory, root's) could only fail at every
// start: `install --user` refuses it, naming that directory and what to
// do. Once the user owns the directory, it is accepted.
func TestInstallRefusesAUserWhoCannotWriteBesideTheSQLiteDatabase(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux: the check reads owners and modes for another user")
	}
	t.Parallel()
	u, err := service.LookupUser("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} { // searchable by nobody
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir, dbDir := filepath.Join(base, "data"), filepath.Join(base, "db")
	for _, d := range []string{dir, dbDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	db := filepath.Join(dbDir, "automator.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, db} {
		if err := os.Chown(p, u.UID, u.GID); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default("https://127.0.0.1:8443")
	cfg.DB = db
	err = checkServiceUserReach(u, "/bin/sh", dir, cfg)
	if err == nil || !strings.Contains(err.Error(), "nobody cannot write "+dbDir+" ") || !strings.Contains(err.Error(), "chown nobody: "+dbDir) {
		t.Fatalf("a SQLite database in a directory nobody cannot write: %v; want it refused, naming %s and the chown", err, dbDir)
	}
	if err := os.Chown(dbDir, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	if err := checkServiceUserReach(u, "/bin/sh", dir, cfg); err != nil {
		t.Errorf("a SQLite database in a directory nobody owns: %v; want it accepted", err)
	}
}
