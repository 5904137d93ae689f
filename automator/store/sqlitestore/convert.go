package sqlitestore

import (
	"errors"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
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

// isForeignKeyViolation reports whether err is SQLite refusing a row whose
// reference (an account) does not exist.
func isForeignKeyViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// isDiskFull reports whether err is SQLite out of disk space (SQLITE_FULL).
func isDiskFull(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL
}
