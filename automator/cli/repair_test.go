package cli

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// damageTable overwrites the first 200 bytes of the first page of the
// table or index name of the data directory's database, its page type
// among them, as a bad sector would.
func damageTable(t *testing.T, dir, name string) string {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := cfg.DBPath(dir)
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var page, size int64
	err = db.QueryRow(`SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_schema WHERE name = ?`, name).Scan(&page, &size)
	db.Close()
	if err != nil {
		t.Fatalf("the first page of %s: %v", name, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 200), (page-1)*size); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRepairRefusesADatabaseWhoseRowsAreDamagedAndChangesNothing: with
// the work table's own page damaged, repair says which table, that a
// backup is the way back, and leaves the database and the data directory
// as they were.
func TestRepairRefusesADatabaseWhoseRowsAreDamagedAndChangesNothing(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	path := damageTable(t, dir, "work")
	before := fileBytes(t, path)

	code, stdout, stderr := runCLI(t, "repair", "--data-dir", dir)
	if code != ExitError || stdout != "" {
		t.Fatalf("repair of a damaged work table: exit %d, stdout %q, stderr %q; want %d", code, stdout, stderr, ExitError)
	}
	for _, want := range []string{path + " is damaged, and the rows of table work cannot all be read", "restore the latest backup instead (`automator restore --data-dir " + dir + " FILE`", "nothing was changed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("repair said %q; want it to say %q", stderr, want)
		}
	}
	if !bytes.Equal(fileBytes(t, path), before) {
		t.Error("a refused repair changed the database")
	}
	if left, _ := filepath.Glob(path + ".*"); len(left) != 0 {
		t.Errorf("a refused repair left files behind: %v", left)
	}
}

// TestACommandOnADamagedDatabaseSaysWhatToDo: a command whose reads meet
// the damage says so, and where to look.
func TestACommandOnADamagedDatabaseSaysWhatToDo(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	damageTable(t, dir, "work")
	code, _, stderr := runCLI(t, "work", "list", "--data-dir", dir)
	if code != ExitError || !strings.Contains(stderr, "database disk image is malformed") || !strings.Contains(stderr, "(the database is damaged: with serve stopped, `automator repair` rebuilds it or says what to do; see docs/backup.md)") {
		t.Errorf("work list on a damaged database: exit %d, stderr %q", code, stderr)
	}
}

// TestRepairOfAPostgreSQLDatabaseSaysWhatToDo: repair rebuilds SQLite
// databases; for PostgreSQL it names PostgreSQL's means, and connects to
// nothing.
func TestRepairOfAPostgreSQLDatabaseSaysWhatToDo(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	code, _, stderr := runCLI(t, "repair", "--data-dir", dir, "--db", "postgres://automator:secret@db.invalid:5432/automator")
	if code != ExitError || !strings.Contains(stderr, "repair it with PostgreSQL's own means: REINDEX the index its error names") || strings.Contains(stderr, "secret") {
		t.Errorf("repair of a PostgreSQL database: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "repair", "--data-dir", dir, "extra"); code != ExitError || !strings.Contains(stderr, `repair takes no arguments, got ["extra"]`) {
		t.Errorf("repair with an argument: exit %d, stderr %q", code, stderr)
	}
}
