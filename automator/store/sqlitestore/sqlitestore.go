// Package sqlitestore is the embedded backend of store.Store, built on
// modernc.org/sqlite (pure Go, no cgo). It serves one automator.
//
// Every write runs on the only write connection, committed together with
// the writes waiting at that moment in one IMMEDIATE transaction by
// whichever caller leads (group commit, writer.go), so writers queue in Go
// (honouring their contexts) instead of failing with SQLITE_BUSY, and a
// single fsync covers many of them. Reads use a separate pool of read-only
// connections; in WAL mode they never block the writer nor wait for it.
// synchronous=FULL makes a commit durable before the call returns; only a
// batch made of SyncLater enqueues alone commits with synchronous=NORMAL,
// its WAL fsynced moments later (walsync.go). Every statement is prepared
// once per connection (prepared.go).
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/opsgate/opsgate/automator/store"
)

// readConns bounds the read pool. SQLite readers in WAL mode run side by
// side; a few are enough for one automator.
const readConns = 4

// busyTimeoutMillis is how long a connection waits on a lock held by another
// connection (the other pool, or another process) before giving up.
const busyTimeoutMillis = 5000

// Store is a store.Store backed by one SQLite database file.
type Store struct {
	path  string
	write *sql.DB   // exactly one connection, the writer's: all writes
	read  *sql.DB   // read-only connections: all reads outside a write
	w     *writer   // runs every write (group commit)
	reads *prepared // s.read with prepared statements

	closeOnce sync.Once
	closeErr  error

	// unwritable is Unwritable's.
	unwritable error

	// movedBatch, when set (by a test), is called after each batch of a
	// deleted account's units AccountDelete moves to its tombstone once
	// the deletion itself committed.
	movedBatch func()
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path and brings its
// schema up to date. The directory must exist.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("opening sqlite store: the path is empty")
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("opening sqlite store %q: directory %q does not exist (create it first): %w", path, dir, err)
		}
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("opening sqlite store %q: %q is not a directory", path, dir)
	}

	// A new database is its owner's alone: SQLite would create it 0644
	// (less the umask), and gives its -wal and -shm files the mode of the
	// database file. An existing file keeps the mode it has.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
	} else if err := regularFile(path); err != nil {
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
	}

	write, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)

	// Migrate before the read pool exists: the first write connection turns
	// the file into WAL mode, and the readers then find it so.
	var unwritable error
	if err := migrate(ctx, write); errors.As(err, new(*readOnlyError)) {
		// Opened all the same: the commands that only read, and a
		// restore's reading of the database it replaces, read it (a
		// re-review: the restore left out its units queued with an
		// idempotency key). Serve refuses it (Unwritable).
		unwritable = notWritable(errors.Unwrap(err), path)
	} else if err != nil {
		write.Close()
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, notWritable(outOfSpace(err, dir), path))
	}

	read, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
	}
	read.SetMaxOpenConns(readConns)
	read.SetMaxIdleConns(readConns)
	read.SetConnMaxLifetime(0)
	read.SetConnMaxIdleTime(0)
	if err := read.PingContext(ctx); err != nil {
		read.Close()
		write.Close()
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, outOfSpace(err, dir))
	}

	return &Store{path: path, write: write, read: read, w: newWriter(write, path), reads: newPrepared(read), unwritable: unwritable}, nil
}

// Unwritable says why this process may not write the database (its file,
// its -wal or -shm, their directory), found as it was opened, or is nil.
// Such a database is opened all the same, for reading; a write to it fails.
// Serve refuses it: it would serve, every write failing.
func (s *Store) Unwritable() error { return s.unwritable }

// regularFile refuses a path that names a directory or a device rather
// than a database file, which SQLite reports as "unable to open database
// file" (a directory) or opens only to fail later.
func regularFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		return errors.New("it is a directory; give the path of a database file")
	case !fi.Mode().IsRegular():
		return errors.New("it is a device, a pipe or a socket, not a file; give the path of a database file")
	}
	return nil
}

// OpenReaders opens every connection of the read pool now, and the pool
// keeps them; Open opens one, and the others open when a burst of reads
// first needs them. `serve` calls it: a connection opened later found an
// automator whose network connections held every file descriptor its
// limit allows unable to open it ("unable to open database file"), and
// the read failed. Short-lived commands and tests need not pay for it.
func (s *Store) OpenReaders(ctx context.Context) error {
	conns := make([]*sql.Conn, 0, readConns)
	defer func() {
		for _, c := range conns {
			c.Close() // back to the pool, idle
		}
	}()
	for range readConns {
		c, err := s.read.Conn(ctx)
		if err != nil {
			return fmt.Errorf("opening the read connections of sqlite store %q: %w", s.path, err)
		}
		conns = append(conns, c)
		if err := c.PingContext(ctx); err != nil {
			return fmt.Errorf("opening the read connections of sqlite store %q: %w", s.path, err)
		}
	}
	return nil
}

// Path returns the database file's path as given to Open.
func (s *Store) Path() string { return s.path }

// Close closes both pools. It is safe to call more than once; later calls
// return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		// The writer commits what was handed over and stops first. The
		// write pool goes last: the last connection to close checkpoints
		// the WAL into the database file.
		s.w.close()
		s.reads.close()
		if err := errors.Join(s.read.Close(), s.write.Close()); err != nil {
			s.closeErr = fmt.Errorf("closing sqlite store %q: %w", s.path, err)
		}
	})
	return s.closeErr
}

// dsn builds the modernc.org/sqlite data source name. Pragmas given as
// _pragma parameters run on every new connection of the pool, so no pooled
// connection can miss one.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMillis))
	q.Add("_pragma", "journal_mode(WAL)")
	// FULL: in WAL mode a commit is fsynced before it returns, so an
	// acknowledged write survives kill -9 and power loss.
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
		// A batch runs each write in a savepoint, so a page a write changes
		// after an earlier write of the batch is first copied into the
		// statement sub-journal. On disk (the default) that journal spills
		// to a temporary file past 64 KiB, two write syscalls a page; in
		// memory it is a copy. It only serves a rollback to the savepoint,
		// never recovery, so durability is the same.
		q.Add("_pragma", "temp_store(MEMORY)")
	}
	return "file:" + uriPath(path) + "?" + q.Encode()
}

// uriPath turns a file path into the path part of an SQLite URI filename:
// forward slashes, the URI's special characters escaped, and an absolute path
// given an empty authority so that it cannot be read as one.
func uriPath(path string) string {
	p := filepath.ToSlash(path)
	p = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
	if runtime.GOOS == "windows" && filepath.VolumeName(path) != "" {
		p = "/" + p // file:///C:/dir/file.db
	}
	if strings.HasPrefix(p, "/") {
		p = "//" + p
	}
	return p
}
