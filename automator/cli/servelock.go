package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/internal/filelock"
)

// lockForServe takes the data directory's serve lock, shared: several
// serves of one directory may run (replicas of a PostgreSQL database, say),
// but none while a restore holds it. The OS drops it when serve ends,
// however it ends.
func lockForServe(dir string) (*filelock.Lock, error) {
	return lockShared(dir, fmt.Sprintf("a restore is under way in %s (it holds %s); start serve once it has finished", dir, config.FileServeLock))
}

// lockForCommand takes the data directory's serve lock, shared, for a
// command other than serve and restore that opens the directory's database
// (account, apikey, audit, backup, cert renew, the listings): it runs
// beside serves and other commands, but never during a restore, which
// would replace the database under it and lose what it wrote. The caller
// holds it for as long as it has the database open (openStore).
func lockForCommand(dir string) (*filelock.Lock, error) {
	return lockShared(dir, fmt.Sprintf("a restore of %s is under way (it holds %s): run the command again once the restore has finished", dir, config.FileServeLock))
}

// lockShared takes the data directory's serve lock, shared; refused is the
// error while a restore holds it.
func lockShared(dir, refused string) (*filelock.Lock, error) {
	path := filepath.Join(dir, config.FileServeLock)
	l, err := filelock.Shared(path)
	if errors.Is(err, filelock.ErrLocked) {
		return nil, errors.New(refused)
	}
	if err != nil {
		return nil, err
	}
	return l, ownLock(path, dir, l)
}

// lockForRestore takes the data directory's serve lock, exclusive: it is
// refused while any serve of the directory runs, or any command that has
// its database open, and keeps any from starting until released.
func lockForRestore(dir string) (*filelock.Lock, error) { return lockAlone(dir, "restore") }

// lockAlone is lockForRestore for the command named cmd (restore,
// repair), which replaces the database.
func lockAlone(dir, cmd string) (*filelock.Lock, error) {
	path := filepath.Join(dir, config.FileServeLock)
	l, err := filelock.Exclusive(path)
	if errors.Is(err, filelock.ErrLocked) {
		return nil, fmt.Errorf("an automator serve or another command is using %s%s, or a restore or repair is; stop it, or let it finish, first (%s replaces the database it has open)", dir, servingAt(dir), cmd)
	}
	if err != nil {
		return nil, err
	}
	return l, ownLock(path, dir, l)
}

// ownLock gives the lock file the data directory's owner (when root made
// it), so that a serve run as the service's user can open it afterwards.
func ownLock(path, dir string, l *filelock.Lock) error {
	if err := keepOwner(path, dir); err != nil {
		l.Release()
		return fmt.Errorf("giving %s the owner of %s: %w", path, dir, err)
	}
	return nil
}

// lockSQLiteForServe takes, exclusive, the lock of the SQLite database
// serve is about to open (DB-serve.lock beside it): SQLite serves one
// automator. A second serve would run beside the first with nothing to
// carry queue events between them, so a unit queued on one would wait for
// the other's polls to end their window, and a caller waiting on one would
// not hear of a result posted to the other. Nil for PostgreSQL, which
// several replicas share.
func lockSQLiteForServe(dir string, cfg config.Config) (*filelock.Lock, error) {
	if pgstore.IsDSN(cfg.DB) {
		return nil, nil
	}
	db := cfg.DBPath(dir)
	return lockSQLiteDB(dir, db, fmt.Sprintf("another automator serve is using the SQLite database %s%s, or a restore or repair is replacing it: SQLite serves one automator; stop that one first, or share a PostgreSQL database between replicas (docs/several-automators.md)", db, servingAt(dir)))
}

// lockSQLiteAlone takes, exclusive, the lock of the SQLite database of
// cfg, as serve does, for the command named cmd (restore, repair), which
// replaces it: the data directory's serve lock (lockAlone) keeps out the
// serves of that directory only, and a serve of another directory given
// the same database (--db) kept it open while the restore replaced it, its
// units then written to the file set aside (a review: a unit lost, and an
// idempotency key's unit run twice).
func lockSQLiteAlone(dir string, cfg config.Config, cmd string) (*filelock.Lock, error) {
	db := cfg.DBPath(dir)
	what := cmd + " replaces the database it has open"
	if cmd == "restore --open-work-only" {
		what = cmd + " ends the units it may be serving"
	}
	return lockSQLiteDB(dir, db, fmt.Sprintf("an automator serve is using the SQLite database %s (of another data directory, given it with --db or in its automator.yaml?); stop it first (%s)", db, what))
}

// lockSQLiteDB takes, exclusive, the lock beside the SQLite database db
// (DB-serve.lock), trying again for serveLockPatience; refused is the
// error while another holds it.
func lockSQLiteDB(dir, db, refused string) (*filelock.Lock, error) {
	path := sqliteLockPath(db)
	l, err := filelock.Exclusive(path)
	// A command holds the lock for a moment to look whether a serve runs
	// (refuseMigratingUnderServe); a serve holds it as long as it runs.
	for try := time.Now(); errors.Is(err, filelock.ErrLocked) && time.Since(try) < serveLockPatience; {
		if serveLockRefused != nil {
			serveLockRefused()
		}
		time.Sleep(serveLockPatience / 20)
		l, err = filelock.Exclusive(path)
	}
	if errors.Is(err, filelock.ErrLocked) {
		return nil, errors.New(refused)
	}
	if err != nil {
		return nil, err
	}
	return l, ownLock(path, dir, l)
}

// sqliteLockPath is the lock file beside the SQLite database db
// (DB-serve.lock), named after the file db leads to: a serve given the
// database through a symbolic link took a lock of another name, and a
// restore through the database's own name replaced it under that serve (a
// review). (A hard link still has a name of its own.)
func sqliteLockPath(db string) string {
	if real, err := filepath.EvalSymlinks(db); err == nil {
		db = real
	}
	return db + "-serve.lock"
}

// serveLockPatience is how long serve tries again for the SQLite
// database's lock held by another: a command's look at it ends in
// moments, another serve's does not.
const serveLockPatience = time.Second

// serveLockRefused, when set, is called each time serve finds the SQLite
// database's lock held and is about to try again (tests).
var serveLockRefused func()

// servingAt says where a serve of dir listens (" (gRPC on …, HTTP on …)"),
// from the file it keeps while it runs; "" when none is recorded.
func servingAt(dir string) string {
	if s, ok, _ := config.ReadServing(dir); ok {
		return fmt.Sprintf(" (gRPC on %s, HTTP on %s)", s.GRPC, s.HTTP)
	}
	return ""
}
