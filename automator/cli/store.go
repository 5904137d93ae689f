package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/filelock"
	"github.com/opsgate/opsgate/internal/prose"
)

// openStore opens the database named by the settings for a command, holding
// the data directory's serve lock shared (lockForCommand) until the store is
// closed: it is refused during a restore, and a restore is refused while it
// is open. With PostgreSQL too: the data directory holds the keys it is
// used with.
func openStore(ctx context.Context, dir string, cfg config.Config) (store.Store, error) {
	return openStoreFor(ctx, dir, cfg, false)
}

// createStore is openStore for init, which may create the SQLite file.
func createStore(ctx context.Context, dir string, cfg config.Config) (store.Store, error) {
	return openStoreFor(ctx, dir, cfg, true)
}

func openStoreFor(ctx context.Context, dir string, cfg config.Config, create bool) (store.Store, error) {
	lock, err := lockForCommand(dir)
	if err != nil {
		return nil, err
	}
	switch {
	case !create:
		err = sqliteExists(dir, cfg)
		if err == nil {
			err = sqliteIsAutomators(ctx, dir, cfg)
		}
	case !pgstore.IsDSN(cfg.DB):
		err = sqliteOfAnotherProgram(ctx, cfg.DBPath(dir))
	}
	if err == nil {
		err = refuseMigratingUnderServe(ctx, dir, cfg)
	}
	var st store.Store
	if err == nil {
		st, err = openDB(ctx, dir, cfg)
	}
	if err != nil {
		lock.Release()
		return nil, err
	}
	return &lockedStore{Store: st, lock: lock}, nil
}

// lockedStore is a store that holds the data directory's serve lock until
// it is closed.
type lockedStore struct {
	store.Store
	lock *filelock.Lock
}

func (s *lockedStore) Close() error {
	err := s.Store.Close()
	if rerr := s.lock.Release(); err == nil {
		err = rerr
	}
	return err
}

// Unwrap returns the store it wraps (store.ForgetCredentials finds the
// credential cache through it).
func (s *lockedStore) Unwrap() store.Store { return s.Store }

// Uncached is the store without its credential cache (store.Uncached).
func (s *lockedStore) Uncached() store.Store { return store.Uncached(s.Store) }

// openLockedStore opens the database named by the settings for a caller
// that holds the data directory's serve lock already (serve, restore): a
// postgres:// or postgresql:// URL is PostgreSQL (several automator
// replicas may share it), anything else a SQLite file (one automator).
// Every command caches credential lookups the same way
// (store.CachedCredentials), so a command that revokes or rotates returns
// only once no automator serves the old credential from its cache.
func openLockedStore(ctx context.Context, dir string, cfg config.Config) (store.Store, error) {
	if err := sqliteExists(dir, cfg); err != nil {
		return nil, err
	}
	if err := sqliteIsAutomators(ctx, dir, cfg); err != nil {
		return nil, err
	}
	return openDB(ctx, dir, cfg)
}

// sqliteExists refuses a SQLite database file that is missing: init
// creates it, and a command that made a new one instead would serve, or
// change, an empty database while the real one is elsewhere (a disk not
// mounted, a data directory copied without it). A restore brings one back.
func sqliteExists(dir string, cfg config.Config) error {
	if pgstore.IsDSN(cfg.DB) {
		return nil
	}
	path := cfg.DBPath(dir)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the database %s is missing, and an empty one is not made in its place: if `automator init` made it, it was moved or deleted, or the disk holding it is not mounted (`automator restore FILE` brings a backup back); otherwise --db, or db in %s, names a file that is not there", path, config.FileConfig)
	}
	return nil
}

// sqliteIsAutomators refuses a SQLite database file that exists but holds
// no automator schema (sqlitestore.IsAutomators: schema_migrations,
// accounts and work): an empty file (emptied, or cut short to nothing) or
// another program's database that --db names by mistake, with a
// schema_migrations table of its own or none. Opening it would migrate the
// automator's tables into it and serve, or change, an empty database, as
// for a missing one (sqliteExists), the other program's file changed
// besides. A file the check cannot read is left to the opening, which says
// what is wrong with it.
func sqliteIsAutomators(ctx context.Context, dir string, cfg config.Config) error {
	if pgstore.IsDSN(cfg.DB) {
		return nil
	}
	path := cfg.DBPath(dir)
	tables, err := sqlitestore.TableNames(ctx, path)
	if err != nil || sqlitestore.IsAutomators(tables) {
		return nil
	}
	if len(tables) == 0 {
		return fmt.Errorf("the database %s is empty (no table), and an automator's is not made in it: if `automator init` made it, it was emptied or cut short (`automator restore FILE` brings a backup back); otherwise --db, or db in %s, names the wrong file", path, config.FileConfig)
	}
	return anotherProgramsDB(path, tables)
}

// sqliteOfAnotherProgram refuses, for init and restore, the SQLite file
// at path when it holds tables but not an automator's schema
// (sqlitestore.IsAutomators): another program's database, which init
// would add the automator's tables to and restore would move aside, where
// every other command refuses it (sqliteIsAutomators). A file that is
// missing, empty, an automator's, or that cannot be read passes.
func sqliteOfAnotherProgram(ctx context.Context, path string) error {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	tables, err := sqlitestore.TableNames(ctx, path)
	if err != nil || len(tables) == 0 || sqlitestore.IsAutomators(tables) {
		return nil
	}
	return anotherProgramsDB(path, tables)
}

// anotherProgramsDB is the error for the SQLite database at path that
// holds tables but no automator's schema.
func anotherProgramsDB(path string, tables []string) error {
	return fmt.Errorf("the database %s is an SQLite database but not an automator's (its tables are %s, without the automator's %s), and the automator's tables are not added to it: --db, or db in %s, names another program's database", path, prose.Some(tables, 5), prose.And(store.MissingAutomatorTables(tables)), config.FileConfig)
}

// anotherApplicationsPG is the error for the PostgreSQL database dsn
// names whose schema holds another application's tables and none of the
// automator's schema (pgstore.NotAutomatorsError): an init, or any command,
// would otherwise migrate the automator's tables into it.
func anotherApplicationsPG(dsn string, e *pgstore.NotAutomatorsError) error {
	return fmt.Errorf("the database %s is a PostgreSQL database but not an automator's (the tables of its schema %s are %s, without the automator's %s), and the automator's tables are not added to it: --db, or db in %s, names another application's database; give the automator a database of its own, or a schema of its own in this one (search_path in the URL)", pgstore.Redact(dsn), e.Schema, prose.Some(e.Tables, 5), prose.And(e.Missing()), config.FileConfig)
}

// refuseMigratingUnderServe refuses a command the SQLite database that a
// serve runs on when the database is of an older schema than this binary's:
// opening it would migrate it under that serve (the binary was replaced and
// serve not restarted yet), whose statements were written for the schema
// it knows. With no serve running, a command migrates it as serve would.
func refuseMigratingUnderServe(ctx context.Context, dir string, cfg config.Config) error {
	if pgstore.IsDSN(cfg.DB) {
		return nil
	}
	db := cfg.DBPath(dir)
	lockPath := sqliteLockPath(db)
	if _, err := os.Stat(lockPath); err != nil {
		return nil // no serve has run on it
	}
	// The schema first: in the usual case it is this binary's, and the
	// serve's lock is not touched.
	v, latest, err := sqlitestore.SchemaVersion(ctx, db)
	if err != nil || v >= latest {
		return err
	}
	// Shared: a serve holds it exclusive, so a shared lock is refused
	// exactly while one runs, and another command looking at the same
	// time (its shared lock) is not taken for a serve.
	l, err := filelock.Shared(lockPath)
	if err == nil {
		l.Release()
		return nil
	}
	if !errors.Is(err, filelock.ErrLocked) {
		return err
	}
	return fmt.Errorf("the database %s is at schema version %d, and an automator serve runs on it%s without having migrated it (one of an earlier release; or one of this release still migrating it as it starts: then run this again in a moment); this binary knows schema version %d and would migrate the database under that serve: restart serve with this binary first (it migrates the database), or run this command with the binary serve runs", db, v, servingAt(dir), latest)
}

// openDB is openLockedStore without the check that a SQLite file exists.
// A database of another program is refused by the store as it migrates
// (for PostgreSQL, under the migration lock: the only check there, which
// replicas starting together pass in turn), said here as the commands'
// checks of a SQLite file say it.
func openDB(ctx context.Context, dir string, cfg config.Config) (store.Store, error) {
	if pgstore.IsDSN(cfg.DB) {
		st, err := pgstore.Open(ctx, cfg.DB)
		if e := (*pgstore.NotAutomatorsError)(nil); errors.As(err, &e) {
			return nil, anotherApplicationsPG(cfg.DB, e)
		}
		if err != nil {
			return nil, fmt.Errorf("db: %w", err)
		}
		return store.CachedCredentials(st, store.CredentialTTL), nil
	}
	st, err := sqlitestore.Open(ctx, cfg.DBPath(dir))
	if e := (*sqlitestore.NotAutomatorsError)(nil); errors.As(err, &e) {
		return nil, anotherProgramsDB(cfg.DBPath(dir), e.Tables)
	}
	if err != nil {
		return nil, err
	}
	return store.CachedCredentials(st, store.CredentialTTL), nil
}

// describeDB names the database for logs and messages, without a password.
func describeDB(dir string, cfg config.Config) string {
	if pgstore.IsDSN(cfg.DB) {
		return pgstore.Redact(cfg.DB)
	}
	return cfg.DBPath(dir)
}

// broadcasterFor returns what carries queue events between the replicas
// sharing st, or nil when st serves one automator only (SQLite).
func broadcasterFor(st store.Store) server.Broadcaster {
	if pg, ok := store.Uncached(st).(*pgstore.Store); ok {
		return pgBroadcaster{pg}
	}
	return nil
}

// reachOf is how a replica on PostgreSQL tells whether it can reach the
// database (pgstore.Store.Reach, on a connection of its own); nil for a
// store of one automator (SQLite).
func reachOf(st store.Store) func(context.Context) error {
	if pg, ok := store.Uncached(st).(*pgstore.Store); ok {
		return pg.Reach
	}
	return nil
}

// batchesOf is what the store runs in shared batches, for /metrics; nil
// for a store without them.
func batchesOf(st store.Store) metrics.BatchSource {
	switch s := store.Uncached(st).(type) {
	case *sqlitestore.Store:
		return s.BatchStats
	case *pgstore.Store:
		return s.BatchStats
	}
	return nil
}

// pgBroadcaster is server.Broadcaster over PostgreSQL NOTIFY/LISTEN.
type pgBroadcaster struct{ s *pgstore.Store }

var eventKinds = map[server.EventKind]pgstore.EventKind{
	server.EventWorkQueued: pgstore.EventWorkQueued,
	server.EventWorkEnded:  pgstore.EventWorkEnded,
	server.EventRunPolled:  pgstore.EventRunPolled,
}

func (b pgBroadcaster) Publish(ctx context.Context, e server.Event) error {
	kind, ok := eventKinds[e.Kind]
	if !ok {
		return fmt.Errorf("publishing a queue event: unknown kind %d", e.Kind)
	}
	return b.s.Publish(ctx, pgstore.Event{Kind: kind, Account: e.Account, WorkID: e.WorkID, InstanceID: e.InstanceID, RunID: e.RunID, PollSeq: e.PollSeq})
}

func (b pgBroadcaster) Listen(ctx context.Context, fn func(server.Event)) error {
	return b.s.Listen(ctx, func(e pgstore.Event) {
		if se, ok := heard(e); ok {
			fn(se)
		}
	})
}

// heard is the server's event for one Listen delivers; ok is false for a
// kind the server does not know.
func heard(e pgstore.Event) (se server.Event, ok bool) {
	if e.Kind == pgstore.EventResumed {
		return server.Event{Kind: server.EventResumed}, true
	}
	for k, pk := range eventKinds {
		if pk == e.Kind {
			return server.Event{Kind: k, Account: e.Account, WorkID: e.WorkID, InstanceID: e.InstanceID, RunID: e.RunID, PollSeq: e.PollSeq}, true
		}
	}
	return server.Event{}, false
}
