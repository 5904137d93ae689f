// Package sqlitetest reads and damages SQLite database files for tests of
// what the automator does with them: SQLite's integrity_check of a file,
// and a page overwritten as a bad sector or a torn copy would leave it.
package sqlitetest

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
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
	page, size := rootPage(t, path, name)
	overwrite(t, path, page, size)
}

// overwrite writes 0xff over the first 200 bytes of page (of size bytes)
// of the database file at path.
func overwrite(t testing.TB, path string, page, size int64) {
	t.Helper()
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

// DamagePage overwrites, as DamageFirstPage does, the pages of kind
// ("leaf", "internal" or "overflow", as SQLite's dbstat names them) of
// the table or index name in the database file at path that are the nth
// of that kind, for each n (from 0, in the b-tree's order). All are found
// before any is damaged (walking a b-tree stops at a damaged page).
func DamagePage(t testing.TB, path, name, kind string, n ...int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	pages := make([]int64, len(n))
	for i, nth := range n {
		if err = db.QueryRow(`SELECT pageno FROM dbstat WHERE name = ? AND pagetype = ? ORDER BY path LIMIT 1 OFFSET ?`, name, kind, nth).Scan(&pages[i]); err != nil {
			err = fmt.Errorf("%s page %d of %s: %w", kind, nth, name, err)
			break
		}
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	_, size := rootPage(t, path, name)
	for _, p := range pages {
		overwrite(t, path, p, size)
	}
}

// RootPage is the first page of the table or index name in the database
// file at path, read only.
func RootPage(t testing.TB, path, name string) int64 {
	t.Helper()
	page, _ := rootPage(t, path, name)
	return page
}

// rootPage is RootPage with the database's page size.
func rootPage(t testing.TB, path, name string) (page, size int64) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.QueryRow(`SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_schema WHERE name = ?`, name).Scan(&page, &size)
	if err != nil {
		t.Fatalf("the first page of %s: %v", name, err)
	}
	return page, size
}

// ChangedPages makes, beside the database at path, a copy changed by the
// statements change, and copies into path the pages of the b-tree tree
// (a table or an index) that the change made different: path's tree then
// holds what change made of it, and the rest of path does not, as a page
// damaged so that it reads without an error would.
func ChangedPages(t testing.TB, path, tree string, change ...string) {
	t.Helper()
	mixPages(t, path, []string{tree}, true, change)
}

// StalePages applies the statements change to the database at path, then
// writes back the pages of the b-tree tree (a table or an index) that the
// change made different, as they were: tree has lost the change's write,
// and the rest of path has it.
func StalePages(t testing.TB, path, tree string, change ...string) {
	t.Helper()
	mixPages(t, path, []string{tree}, false, change)
}

// StaleRegion is StalePages for the b-trees trees together: all of them
// lost the change's writes, as a region of a disk rolled back would.
func StaleRegion(t testing.TB, path string, trees []string, change ...string) {
	t.Helper()
	mixPages(t, path, trees, false, change)
}

// mixPages applies change to a copy of the database at path and writes
// into path the copy's pages of trees that the change made different
// (changedTree) with the rest of path as it was, or the copy with those
// pages of trees as they were.
func mixPages(t testing.TB, path string, trees []string, changedTree bool, change []string) {
	t.Helper()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	other := path + ".changed"
	if err := os.WriteFile(other, before, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(other)
	db, err := sql.Open("sqlite", "file:"+other)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range change {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var pages []int64
	names, err := json.Marshal(trees)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT pageno FROM dbstat WHERE name IN (SELECT value FROM json_each(?))`, string(names))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
	}
	rows.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	into, from := after, before // the change, with tree's pages as they were
	if changedTree {
		into, from = before, after
	}
	const pageSize = 4096
	mixed := 0
	for _, p := range pages {
		lo, hi := (p-1)*pageSize, p*pageSize
		if hi <= int64(len(before)) && string(before[lo:hi]) != string(after[lo:hi]) {
			copy(into[lo:hi], from[lo:hi])
			mixed++
		}
	}
	if mixed == 0 {
		t.Fatalf("no page of %s changed", strings.Join(trees, ", "))
	}
	if err := os.WriteFile(path, into, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Lock holds the SQLite database at path locked, as another program's
// write transaction (a sqlite3 shell's BEGIN IMMEDIATE) does, until the
// test ends or the transaction it returns is rolled back. It waits up to
// 30 s for the lock: an automator just started may be writing.
func Lock(t testing.TB, path string) *sql.Tx {
	t.Helper()
	other, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(30000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	tx, err := other.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	return tx
}
