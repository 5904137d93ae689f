package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/prose"
)

// Backup writes a consistent copy of the whole database, as it was at one
// moment, into the file at path, which must be empty (the caller makes it,
// with the mode it wants) or absent. SQLite makes the copy (VACUUM INTO)
// in one read transaction, on a connection of its own (the read pool's
// are query_only, which VACUUM INTO refuses): in WAL mode the writes go
// on meanwhile, of this process or another, and the copy holds none of
// them, nor any half of one.
// The copy is one self-contained file, without a write-ahead log. It is
// not synced to disk: the caller does that before it names the file.
func (s *Store) Backup(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", dsn(s.path, false))
	if err != nil {
		return fmt.Errorf("copying sqlite store %q: %w", s.path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		dir := filepath.Dir(path)
		if full := outOfSpace(err, dir); store.IsStorageFull(full) {
			// The copy's file system is full, not the database's (which
			// VACUUM INTO only reads): said so, not as the database out
			// of space. Still ErrStorageFull, for callers that tell it.
			free, _ := freeSpace(dir)
			return fmt.Errorf("copying sqlite store %q into %q: %w (%d bytes free in %s; it needs about the database's size): %w", s.path, path, copyFull{}, free, dir, err)
		}
		return fmt.Errorf("copying sqlite store %q into %q: %w", s.path, path, err)
	}
	// The copy's own record, appended to it alone: it says, once
	// restored, what the file was.
	cp, err := sql.Open("sqlite", "file:"+uriPath(path)+"?_pragma=synchronous(FULL)")
	if err != nil {
		return fmt.Errorf("opening the copy %q: %w", path, err)
	}
	defer cp.Close()
	if _, err := cp.ExecContext(ctx, `INSERT INTO audit (at, kind, detail) VALUES (?, ?, ?)`, time.Now().UnixNano(), store.AuditBackup, BackupCopyDetail); err != nil {
		if full := outOfSpace(err, filepath.Dir(path)); store.IsStorageFull(full) {
			return fmt.Errorf("marking the copy %q: %w: %w", path, copyFull{}, err)
		}
		return fmt.Errorf("marking the copy %q: %w", path, err)
	}
	return cp.Close()
}

// copyFull is store.ErrStorageFull of a copy's file system, worded for
// it: the database's own may have room to spare.
type copyFull struct{}

func (copyFull) Error() string        { return "no room for the copy" }
func (copyFull) Is(target error) bool { return target == store.ErrStorageFull }

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// StartsAsDatabase tells whether head, the first bytes of a file, begin
// as every SQLite database file's do.
func StartsAsDatabase(head []byte) bool { return bytes.HasPrefix(head, sqliteHeader) }

// ErrNotAutomatorDB: a file is not an automator's SQLite database.
var ErrNotAutomatorDB = errors.New("not an automator database")

// CheckHeader tells whether the file at path starts as an SQLite database
// does, and is as long as its header says, reading only its first bytes:
// an error matching ErrNotAutomatorDB that says what the file is not, an
// error saying it is cut short, otherwise nil.
func CheckHeader(path string) error { return checkHeader(path, path) }

// sqliteHeaderSize is the size of an SQLite database file's header.
const sqliteHeaderSize = 100

func checkHeader(path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, sqliteHeaderSize)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	if n < len(sqliteHeader) || !bytes.Equal(head[:len(sqliteHeader)], sqliteHeader) {
		return fmt.Errorf("%s is not an SQLite database (it does not start with SQLite's header): %w", name, ErrNotAutomatorDB)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	size := fi.Size()
	if n < sqliteHeaderSize {
		return fmt.Errorf("%s is cut short: %d bytes, less than an SQLite database's header (a copy or a transfer that did not finish?)", name, size)
	}
	// The page size (1 stands for 65536) and the database's size in pages,
	// which SQLite keeps in the header; the size is valid when the change
	// counter matches the version-valid-for number. SQLite reads a missing
	// tail as zeros, and quick_check does not notice one cut from an
	// index's page: the length has to be checked here.
	pageSize := int64(binary.BigEndian.Uint16(head[16:18]))
	if pageSize == 1 {
		pageSize = 65536
	}
	pages := int64(binary.BigEndian.Uint32(head[28:32]))
	if pages > 0 && bytes.Equal(head[24:28], head[92:96]) && size < pages*pageSize {
		return fmt.Errorf("%s is cut short: its header says %d bytes, the file has %d (a copy or a transfer that did not finish?)", name, pages*pageSize, size)
	}
	if pageSize >= 512 && size%pageSize != 0 {
		return fmt.Errorf("%s is damaged: %d bytes, not a whole number of its %d-byte pages (cut short?)", name, size, pageSize)
	}
	return nil
}

// Snapshot is what Inspect found in a database file.
type Snapshot struct {
	// Version is its schema version.
	Version int
	// LastEvent is the time of the latest event of its audit log, zero
	// when it has none, and LastEventKind its kind.
	LastEvent     time.Time
	LastEventKind string
	// BackupBegan is the time of the latest record of a backup's start
	// (BackupBeganDetail), zero when it has none.
	BackupBegan time.Time
	// Copied is the time Backup made the file, from the record it
	// appends to its copy (BackupCopyDetail), which no other database
	// holds last; zero when that is not its last record (a database kept
	// aside by a restore, a file system's snapshot, a copy made by an
	// earlier release).
	Copied time.Time
}

// BackupBeganDetail is the detail of the store.AuditBackup record a backup
// appends as it begins (its end's record has another).
const BackupBeganDetail = "backup of the database"

// BackupCopyDetail is the detail of the store.AuditBackup record Backup
// appends to the copy it makes, and only there: a restore tells a copy
// that `automator backup` made by it, however many events of calls served
// while the copy began follow its start's record (a review saw those
// taken for a file of another kind).
const BackupCopyDetail = "this file is a copy of the database made by automator backup"

// Inspect checks, without changing it, that the file at path is an
// automator's SQLite database that this binary can serve: not newer than
// this binary knows (an older one is migrated when it is opened), and
// whole (SQLite's quick_check). Its errors name the file name (path, or
// the name the caller knows a copy at path by). The file must not be in
// use by another process.
func Inspect(ctx context.Context, path, name string) (Snapshot, error) {
	var snap Snapshot
	if err := checkHeader(path, name); err != nil {
		return snap, err
	}
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro")
	if err != nil {
		return snap, fmt.Errorf("opening %s: %w", name, err)
	}
	defer db.Close()
	tables, err := tableNames(ctx, db)
	if err != nil {
		return snap, fmt.Errorf("reading %s: %w", name, err)
	}
	if !IsAutomators(tables) {
		return snap, fmt.Errorf("%s is an SQLite database but not an automator's (it lacks the %s tables): %w", name, prose.And(store.MissingAutomatorTables(tables)), ErrNotAutomatorDB)
	}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&snap.Version); err != nil {
		return snap, fmt.Errorf("reading the schema version of %s: %w", name, err)
	}
	if latest := migrations[len(migrations)-1].version; snap.Version > latest {
		return snap, fmt.Errorf("the database in %s is at version %d, newer than this binary knows (%d); run a newer automator", name, snap.Version, latest)
	}
	rows, err := db.QueryContext(ctx, `PRAGMA quick_check`)
	if err != nil {
		return snap, fmt.Errorf("checking %s: %w", name, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return snap, fmt.Errorf("checking %s: %w", name, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return snap, fmt.Errorf("checking %s: %w", name, err)
	}
	if len(problems) > 0 {
		return snap, fmt.Errorf("%s is damaged (SQLite's quick_check: %s)", name, strings.Join(problems[:min(len(problems), 3)], "; "))
	}
	if snap.Version >= 3 { // the audit log came with version 3
		var last int64
		err := db.QueryRowContext(ctx, `SELECT at, kind FROM audit ORDER BY at DESC, seq DESC LIMIT 1`).Scan(&last, &snap.LastEventKind)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return snap, fmt.Errorf("reading the audit log of %s: %w", name, err)
		default:
			snap.LastEvent = fromNanos(last)
		}
		var copied int64
		err = db.QueryRowContext(ctx, `SELECT at FROM audit WHERE seq = (SELECT MAX(seq) FROM audit) AND kind = ? AND detail = ?`, store.AuditBackup, BackupCopyDetail).Scan(&copied)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return snap, fmt.Errorf("reading the audit log of %s: %w", name, err)
		default:
			snap.Copied = fromNanos(copied)
		}
		var began sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT MAX(at) FROM audit WHERE kind = ? AND detail = ?`, store.AuditBackup, BackupBeganDetail).Scan(&began); err != nil {
			return snap, fmt.Errorf("reading the audit log of %s: %w", name, err)
		}
		if began.Valid {
			snap.BackupBegan = fromNanos(began.Int64)
		}
	}
	return snap, nil
}

// CredentialsChanged returns, for each account its audit log names, when
// its token or key last changed: its latest account.created,
// account.token_rotated or account.key_rotated event (one purged past
// audit_retention is not counted).
func (s *Store) CredentialsChanged(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT account, MAX(at) FROM audit WHERE kind IN (?, ?, ?) GROUP BY account`,
		store.AuditAccountCreated, store.AuditTokenRotated, store.AuditKeyRotated)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	changed := map[string]time.Time{}
	for rows.Next() {
		var account string
		var at int64
		if err := rows.Scan(&account, &at); err != nil {
			return nil, err
		}
		changed[account] = fromNanos(at)
	}
	return changed, rows.Err()
}

// LatestVersion is the latest schema version this binary knows: Open
// migrates a database to it.
func LatestVersion() int { return migrations[len(migrations)-1].version }

// SchemaVersion reads the schema version of the database at path without
// migrating it (a write-ahead log a crash left is recovered into it, as
// any opening does), and returns it with the latest this binary knows:
// version 0 for a database that is not an automator's (IsAutomators), an
// empty one or another program's, whose schema_migrations, if it has one,
// holds that program's versions. The file must not be in use by another
// process.
func SchemaVersion(ctx context.Context, path string) (version, latest int, err error) {
	latest = migrations[len(migrations)-1].version
	if err := regularFile(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, latest, fmt.Errorf("opening %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return 0, latest, fmt.Errorf("opening %s: %w", path, err)
	}
	defer db.Close()
	tables, err := tableNames(ctx, db)
	if err != nil {
		return 0, latest, fmt.Errorf("reading the schema version of %s: %w", path, err)
	}
	if !IsAutomators(tables) {
		return 0, latest, nil
	}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
		return 0, latest, fmt.Errorf("reading the schema version of %s: %w", path, err)
	}
	return version, latest, db.Close()
}

// TableNames returns the names of the tables of the SQLite database at
// path, in order, read without changing it (read only: no migration, no
// change of journal mode), so a caller can tell an automator's database
// (IsAutomators) from an empty file or another program's database before
// Open migrates it into one. It may run while an automator serves the
// database.
func TableNames(ctx context.Context, path string) ([]string, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMillis))
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer db.Close()
	names, err := tableNames(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("reading the tables of %s: %w", path, err)
	}
	return names, db.Close()
}
