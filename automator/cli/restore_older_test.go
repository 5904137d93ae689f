package cli

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestARefusedRestoreLeavesAnOlderSchemaAsItWas: "nothing in the data
// directory changes until step 4; a refused or failed restore leaves it as
// it was" (docs/backup.md) holds for a database of an older schema too:
// the restore reads the database it would replace (for the credentials
// withdrawn since the backup) without migrating it, so that a restore
// refused at the last step leaves a database the older binary still opens.
func TestARefusedRestoreLeavesAnOlderSchemaAsItWas(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	cfg, _ := config.Load(dir)
	dbPath := cfg.DBPath(dir)
	downgradeToVersion8(t, dbPath) // as the previous release left it
	before := fileBytes(t, dbPath)
	// Names a restore in the coming seconds would keep the database aside
	// under, taken already: the restore is refused at its last step.
	now := time.Now()
	for s := range 30 {
		aside := dbPath + ".before-restore-" + now.Add(time.Duration(s)*time.Second).UTC().Format("20060102T150405Z")
		if err := os.WriteFile(aside, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != ExitError || !strings.Contains(stderr, "run restore again") || stdout != "" {
		t.Fatalf("restore with the aside name taken: exit %d, stdout %q, stderr %q; want %d", code, stdout, stderr, ExitError)
	}
	if v := schemaVersion(t, dbPath); v != 8 {
		t.Errorf("after a refused restore the database is at schema version %d, want 8 as it was", v)
	}
	if !bytes.Equal(fileBytes(t, dbPath), before) {
		t.Errorf("a refused restore changed the database")
	}

	// Once the names are free, the restore reads the older database (a key
	// revoked in it is revoked again) and keeps it aside as it was.
	taken, _ := filepath.Glob(dbPath + ".before-restore-*")
	for _, f := range taken {
		os.Remove(f)
	}
	execSQLite(t, dbPath, fmt.Sprintf(`UPDATE api_keys SET revoked_at = %d WHERE id = 'ak_later_revoked'`, time.Now().UnixNano()))
	code, stdout, stderr = runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 || !strings.Contains(stdout, "API key ak_later_revoked (ci) was revoked after the backup was taken: revoked again") {
		t.Fatalf("restore over a database of schema version 8: exit %d, stdout %q, stderr %q; want the key revoked again", code, stdout, stderr)
	}
	aside, _ := filepath.Glob(dbPath + ".before-restore-*")
	if len(aside) != 1 {
		t.Fatalf("kept aside: %v, want one file", aside)
	}
	if v := schemaVersion(t, aside[0]); v != 8 {
		t.Errorf("the database kept aside is at schema version %d, want 8 as it was", v)
	}
	if left, _ := filepath.Glob(dbPath + ".previous*"); len(left) != 0 {
		t.Errorf("the restore left %v", left)
	}
}

func schemaVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRestoreOfAnOlderBackupSaysItWasMigrated: a backup of an older schema
// is migrated as it is restored, and restore says so: it printed the
// backup's schema version as that of the database it restored.
func TestRestoreOfAnOlderBackupSaysItWasMigrated(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	downgradeToVersion8(t, file)
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	cfg, _ := config.Load(dir)
	latest := sqlitestore.LatestVersion()
	if v := schemaVersion(t, cfg.DBPath(dir)); v != latest || !strings.Contains(stdout, fmt.Sprintf("schema version 8, migrated to %d", latest)) {
		t.Errorf("restore of a backup at schema version 8 printed:\n%s\nand left the database at version %d; want %d, and the restore to say it migrated the backup to %d", stdout, v, latest, latest)
	}
}

// downgradeToVersion8 makes the SQLite database at path what an earlier
// release left: schema version 8, before accounts could be left being
// deleted (9), before the listing indexes of the units that ended
// without success (10), before instances that said they were stopping
// (11), before the run and number of an instance's poll (12), before
// instances whose polls are refused for want of a usable key (13),
// before the cause of a refusal (14), before audit events could be
// deleted past audit_retention (15) and before an insert could not replace
// them (16).
func downgradeToVersion8(t *testing.T, path string) {
	t.Helper()
	execSQLite(t, path, `DROP TABLE audit_purged`, `DROP TRIGGER audit_no_replace`, `DROP TRIGGER audit_no_delete`,
		`CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END`,
		`ALTER TABLE instances DROP COLUMN stopped_at`,
		`ALTER TABLE instances DROP COLUMN poll_run`, `ALTER TABLE instances DROP COLUMN poll_seq`,
		`ALTER TABLE instances DROP COLUMN refused_at`, `ALTER TABLE instances DROP COLUMN refused_key_ids`,
		`ALTER TABLE instances DROP COLUMN refused_cause`,
		`DROP INDEX work_unsuccessful`, `DROP INDEX work_account_unsuccessful`,
		`ALTER TABLE accounts DROP COLUMN moving_to`, `DELETE FROM schema_migrations WHERE version >= 9`)
}
