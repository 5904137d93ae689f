package sqlitestore

import (
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/opsgate/opsgate/automator/store"
)

// Times are stored as INTEGER unix nanoseconds, 0 for the zero time, so that
// sub-microsecond precision survives and comparisons are integer compares.

func toNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// nonNil turns a nil slice into an empty one: the driver binds nil as NULL,
// and the NOT NULL blob columns want an empty blob instead.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// lowSpace is the free space under which an I/O error is put down to a
// full disk: less than SQLite needs to grow its files by a step.
const lowSpace = 1 << 20

// outOfSpace wraps err in store.ErrStorageFull when it is SQLite out of disk
// space: SQLITE_FULL, or an I/O error while the file system of dir (the
// database's) has next to no space left, as when SQLite cannot grow the WAL
// index (SQLITE_IOERR_SHMSIZE, at open among other times).
func outOfSpace(err error, dir string) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	code := se.Code() & 0xff
	if code != sqlite3.SQLITE_FULL && code != sqlite3.SQLITE_IOERR {
		return err
	}
	free, ok := freeSpace(dir)
	if code == sqlite3.SQLITE_IOERR && (!ok || free >= lowSpace) {
		return err
	}
	return fmt.Errorf("%w (%d bytes free in %s): %w", store.ErrStorageFull, free, dir, err)
}
