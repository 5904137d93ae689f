package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/sqlitetest"
)

// TestRestoreRefusesATruncatedBackup: a backup that lost its last bytes
// (a copy or transfer cut short) is refused, the database left as it was.
// SQLite's quick_check alone passes such a file when only the tail of its
// last page (an index's, whose entries it does not compare with the
// table) is missing: the restored database would lack a unit's entry in
// its primary key's index, silently.
func TestRestoreRefusesATruncatedBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	withStore(t, dir, func(st *sqlitestore.Store) {
		now := time.Now()
		for i := range 300 {
			if _, err := st.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: fmt.Sprintf("w-%06d", i), Account: "acme", KeyID: 1,
				SealedCommand: []byte("c"), Now: now, Deadline: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
	})
	file := takeBackup(t, dir)
	data := fileBytes(t, file)
	cfg, _ := config.Load(dir)
	dbPath := cfg.DBPath(dir)
	before := fileBytes(t, dbPath)
	if tail := data[len(data)-12:]; bytes.Equal(tail, make([]byte, len(tail))) {
		t.Fatalf("the backup ends in zeros, which a cut loses nothing of; this test wants a last page full to its end")
	}
	for _, cut := range []int{7} { // any of 1 to 12 here
		truncated := filepath.Join(t.TempDir(), "truncated.db")
		if err := os.WriteFile(truncated, data[:len(data)-cut], 0o600); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, truncated)
		if code != ExitError || !strings.Contains(stderr, truncated) || stdout != "" {
			t.Errorf("restore of a backup cut short by %d bytes: exit %d, stdout %q, stderr %q; want %d and one line naming it",
				cut, code, stdout, stderr, ExitError)
			if code == 0 {
				t.Errorf("integrity_check of the database it restored: %s", sqlitetest.IntegrityCheck(t, dbPath))
			}
			continue
		}
		if !bytes.Equal(fileBytes(t, dbPath), before) {
			t.Errorf("a refused restore changed the database")
		}
	}
}
