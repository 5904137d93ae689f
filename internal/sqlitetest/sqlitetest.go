// Package sqlitetest reads and damages SQLite database files for tests of
// what the automator does with them: SQLite's integrity_check of a file,
// and a page overwritten as a bad sector or a torn copy would leave it.
package sqlitetest

import (
	"bytes"
	"database/sql"
	"os"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// IntegrityCheck runs SQLite's full integrity_check on the database file
// at path, read only, and returns what it says ("ok" for a whole file),
// its lines joined with "; ", or the error that stopped it.
func IntegrityCheck(t testing.TB, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`PRAGMA integrity_check`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return err.Error()
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		lines = append(lines, err.Error())
	}
	return strings.Join(lines, "; ")
}

// DamageFirstPage overwrites the first 200 bytes of the first page of the
// table or index name in the database file at path, its page type among
// them, as a bad sector would: SQLite then finds that page malformed. The
// database must not be open elsewhere, and its write-ahead log, if any,
// must hold no newer copy of the page (a database closed by its last
// connection has none).
func DamageFirstPage(t testing.TB, path, name string) {
	t.Helper()
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
	_, err = f.WriteAt(bytes.Repeat([]byte{0xff}, 200), (page-1)*size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}
