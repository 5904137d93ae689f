package server

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/opsgate/opsgate/automator/store"
)

// TestAUnitWhoseEnqueueFoundTheDatabaseLockedIsNotStored: SQLite rolled
// such an enqueue back, so no failing of its poll's claim is tried (it
// logged, while the lock lasted, units that never existed: a review); one
// whose answer was lost may be stored, and one the store refused is not.
func TestAUnitWhoseEnqueueFoundTheDatabaseLockedIsNotStored(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		return db
	}
	holder, other := open(), open()
	if _, err := holder.Exec(`CREATE TABLE t (x)`); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	_, locked := other.Exec(`INSERT INTO t VALUES (2)`)
	if !store.IsLocked(locked) {
		t.Fatalf("a write beside another connection's write transaction: %v; want SQLITE_BUSY", locked)
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("enqueueing: %w", locked), false},
		{store.ErrStorageFull, false},
		{store.ErrDuplicate, false},
		{errors.New("connection lost after the commit"), true},
	} {
		if got := mayBeStored(c.err); got != c.want {
			t.Errorf("mayBeStored(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
