package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/disktest"
)

// TestABackupRecordsHowItEnded: a backup records, after its start, whether
// it wrote its file, with its size, or failed and wrote nothing (here a
// full file system), so that an auditor tells them apart (a review: a
// failed backup's record said what a written one's did).
func TestABackupRecordsHowItEnded(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	full := filepath.Join(disktest.Small(t, 16<<10), "b.db")
	if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, full); code != ExitError {
		t.Fatalf("backup onto a file system with no room: exit %d, %s; want %d", code, stderr, ExitError)
	}
	if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, filepath.Join(t.TempDir(), "b.db")); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	_, audit, _ := runCLI(t, "audit", "--data-dir", dir)
	if strings.Count(audit, "backup of the database to "+full+" failed, nothing written") != 1 || strings.Count(audit, "backup of the database written to ") != 1 {
		t.Errorf("audit after a failed and a written backup:\n%s\nwant one record of each end", audit)
	}
}

// TestABackupRemovesThePartsOfBackupsKilledBeforeTheyEnded: a backup
// killed (SIGKILL) leaves its temporary copy of the database in FILE's
// directory, which nothing else removes (a review); the next backup into
// that directory removes such a file unchanged for staleAfter, saying so,
// and leaves one written to more recently (a backup under way) and other
// files alone.
func TestABackupRemovesThePartsOfBackupsKilledBeforeTheyEnded(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backups := t.TempDir()
	old := time.Now().Add(-staleAfter - time.Minute)
	files := map[string]bool{ // name: removed
		".a.db.partial-123":         true,
		".a.db.partial-123-journal": true,
		".e.db.partial-654":         true,  // empty: the copy not begun
		".b.db.partial-456":         false, // written to a moment ago
		".c.db.partial-x":           false, // not a backup's name
		"a.db.partial-789":          false, // not hidden
		".d.db.partial-321":         false, // another program's: no SQLite database
		"keep.db":                   false,
	}
	sqliteStart := append([]byte("SQLite format 3\x00"), make([]byte, 84)...)
	journalStart := append([]byte{0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7}, make([]byte, 20)...)
	for name, removed := range files {
		path := filepath.Join(backups, name)
		content := sqliteStart
		switch {
		case strings.HasSuffix(name, "-journal"):
			content = journalStart
		case name == ".e.db.partial-654":
			content = nil
		case name == ".d.db.partial-321":
			content = []byte("data of another program\n")
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if removed || name != ".b.db.partial-456" {
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, stdout, stderr := runCLI(t, "backup", "--data-dir", dir, filepath.Join(backups, "new.db"))
	if code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	for name, removed := range files {
		_, err := os.Stat(filepath.Join(backups, name))
		if gone := os.IsNotExist(err); gone != removed {
			t.Errorf("%s: removed %v, want %v", name, gone, removed)
		}
		if said := strings.Contains(stdout, "removed "+filepath.Join(backups, name)+","); said != removed {
			t.Errorf("stdout %q says %s removed: %v, want %v", stdout, name, said, removed)
		}
	}
}
