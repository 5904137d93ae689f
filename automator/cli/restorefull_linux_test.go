package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/disktest"
)

// TestARestoreWithNoRoomSaysSoAndReplacesNothing: a restore whose data
// directory's file system has no room for the copy of the backup it makes
// first says so, with the room it needs, and that nothing was replaced;
// the database is left as it was. Before, it said "write
// …/automator.db.restoring: no space left on device" (a review).
func TestARestoreWithNoRoomSaysSoAndReplacesNothing(t *testing.T) {
	t.Parallel()
	disk := disktest.Small(t, 4<<20)
	dir := filepath.Join(disk, "data")
	if code, _, stderr := runCLI(t, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, stderr)
	}
	file := takeBackup(t, dir)
	db := filepath.Join(dir, "automator.db")
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	free := disktest.Fill(t, disk)
	defer free()
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != ExitError || stdout != "" || !strings.Contains(stderr, "no room beside the database in "+dir+" for the copy of "+file) ||
		!strings.Contains(stderr, "bytes; the replaced database is then kept beside it too): nothing was replaced") {
		t.Fatalf("restore onto a full file system: exit %d, stdout %q, stderr %q; want it refused, saying so and that nothing was replaced", code, stdout, stderr)
	}
	after, err := os.ReadFile(db)
	if err != nil || string(after) != string(before) {
		t.Errorf("the database after the refused restore: %v, changed %v", err, string(after) != string(before))
	}
	if _, err := os.Stat(db + ".restoring"); !os.IsNotExist(err) {
		t.Errorf("the restore's partial copy was left: %v", err)
	}
}
