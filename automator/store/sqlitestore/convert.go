package sqlitestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// isReadOnly reports whether err is SQLite's SQLITE_READONLY, of any
// extended code: this process may not write the database's files.
func isReadOnly(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_READONLY
}

// notWritable says, for a SQLITE_READONLY err of the database at path,
// which of its files this process may not write: SQLite names only the
// database, though a -shm or -wal file beside it, made while the database
// itself was read only (SQLite gives them its mode) and left, makes it
// read only as well once the database is writable again.
func notWritable(err error, path string) error {
	if !isReadOnly(err) {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		f, oerr := os.OpenFile(p, os.O_WRONLY, 0)
		if oerr == nil {
			f.Close()
			continue
		}
		if errors.Is(oerr, syscall.EROFS) {
			return fmt.Errorf("%s is on a read-only file system: %w", p, err)
		}
		if errors.Is(oerr, fs.ErrPermission) {
			mode := ""
			fi, serr := os.Stat(p)
			if serr == nil {
				mode = fmt.Sprintf(" (mode %v)", fi.Mode().Perm())
			}
			fix := "give it to the automator's user, mode 0600"
			switch {
			case errors.Is(oerr, syscall.EPERM) && serr == nil && (os.Geteuid() == 0 || fi.Mode().Perm()&0o200 != 0 && ownedByMe(fi)):
				// Neither its owner nor its mode stops this user.
				fix = "its owner and mode allow it, so an attribute forbids it: immutable or append-only (lsattr; chattr -i or -a)"
			case strings.HasSuffix(p, "-wal"):
				// It may hold committed transactions not yet in the
				// database (a re-review: removing it was advised).
				fix = "give it the database's owner and mode 0600 (do not remove it: it may hold committed transactions)"
			case p != path:
				fix = "SQLite made it beside the database with the database's mode, when the database was read only; with serve stopped, remove it, or give it the database's owner and mode 0600"
			}
			return fmt.Errorf("%s is not writable by this user%s: %s: %w", p, mode, fix, err)
		}
	}
	if f, terr := os.CreateTemp(filepath.Dir(path), ".write-test-*"); terr == nil {
		f.Close()
		os.Remove(f.Name())
	} else if errors.Is(terr, fs.ErrPermission) {
		return fmt.Errorf("the directory %s is not writable by this user (SQLite makes its -wal and -shm files there): %w", filepath.Dir(path), err)
	}
	return err
}
