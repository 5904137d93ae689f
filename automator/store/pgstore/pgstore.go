// Package pgstore is the PostgreSQL backend of store.Store, built on
// github.com/jackc/pgx/v5. Several automator replicas share one database
// through it:
//
//   - claims are one statement that locks the oldest queued units with
//     FOR UPDATE SKIP LOCKED and moves them to claimed only while they are
//     still queued, so concurrent claimers on any replica never wait for
//     each other nor take a unit twice;
//   - the deadline sweep locks due units the same way, so any number of
//     replicas may sweep at once;
//   - schema migrations run in one transaction under an advisory lock, so
//     replicas starting together apply each step once;
//   - Publish and Listen carry queue events between replicas with
//     NOTIFY/LISTEN (see notify.go).
//
// Times are timestamptz: microseconds, the precision the conformance suite
// demands. The database's search_path decides the schema (a connection
// string may set it, as the tests do with one schema each).
//
// It needs session semantics from every connection (LISTEN, advisory locks,
// prepared statements): behind a connection pooler, use session pooling.
package pgstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
)

// defaultMaxConns sizes the pool when the connection string does not
// (pool_max_conns): long polls and waiting callers each hold a connection
// only for one short statement at a time.
const defaultMaxConns = 16

// idleInTransactionTimeout is PostgreSQL's idle_in_transaction_session_timeout
// for the store's sessions, unless the connection string sets one: a
// replica that hangs (stopped, frozen, cut off) inside one of the few
// transactions that take more than one round trip (an enqueue with an
// idempotency key, an account's rotation or deletion, a restore's end of
// open units) loses its session, and its locks, after this long instead of
// holding them until it comes back. The store's own transactions never wait
// on the client for more than milliseconds.
const idleInTransactionTimeout = "5s"

// deadPeerSettings make PostgreSQL notice within about half a minute that
// a replica's host died or was cut off (no traffic for 10 s, then three
// unanswered probes 5 s apart; or data unacknowledged for 30 s), each
// unless the connection string sets it. It then ends the session and
// frees its locks: a session in the middle of a statement or of a batch
// waiting for its Sync, which idleInTransactionTimeout does not reach,
// would otherwise hold them for as long as the operating system's
// defaults say (on Linux, two hours). Over a Unix socket they do nothing.
var deadPeerSettings = map[string]string{
	"tcp_keepalives_idle":     "10",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
	"tcp_user_timeout":        "30000", // ms
}

// Store is a store.Store backed by a PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	// listenConfig opens Listen's dedicated connections, outside the pool.
	listenConfig *pgx.ConnConfig
	// channel is the NOTIFY channel of this schema's automators.
	channel string
	// origin tags the events this Store publishes, so its own Listen skips
	// them (the server has applied them locally already).
	origin string
	// redacted is the connection string without its password, for errors.
	redacted string
	// migrated: the schema's version before Open, 0 for a new one, and
	// after it (Migrated).
	migrated [2]int

	listenMu sync.Mutex
	// heard is when a Listen connection of this Store was last known to be
	// healthy, or when the Store was opened: a new Listen catches up from
	// it, the first one too (another replica may queue or end units before
	// this one listens).
	heard time.Time
	// testHookListening, when set, is called each time Listen is ready:
	// listening, and caught up.
	testHookListening func()
	// listenSetup bounds a Listen's start (defaultListenSetup).
	listenSetup time.Duration

	// notify coalesces the NOTIFYs of concurrent Publish calls (notify.go).
	notify notifier
	// testHookNotify, when set, is called before each NOTIFY statement is
	// sent, with the process id of the session that will run it.
	testHookNotify func(pid uint32)
	// writeTimeout bounds a write once sent (groupTimeout).
	writeTimeout time.Duration
	// group gathers concurrent writes into shared transactions (group.go).
	group grouper
	// reads gathers concurrent WorkGet calls into shared round trips.
	reads grouper

	// holdWait, holdPing and holdTimeout time a ReplicaHold
	// (replicahold.go).
	holdWait, holdPing, holdTimeout time.Duration
	// testHookHoldLost, when set, is called when a ReplicaHold has found
	// its connection lost, before it connects again.
	testHookHoldLost func()

	closeOnce sync.Once
}

var _ store.Store = (*Store)(nil)

// IsDSN reports whether db names a PostgreSQL database: a postgres:// or
// postgresql:// URL.
func IsDSN(db string) bool {
	u, err := url.Parse(db)
	return err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql")
}

// Redact returns dsn with its password replaced by "xxxxx", for logs and
// errors.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(a connection string that does not parse)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	// password, and sslpassword, which opens an encrypted client key.
	q := u.Query()
	redacted := false
	for k := range q {
		if k == "password" || k == "sslpassword" {
			q.Set(k, "xxxxx")
			redacted = true
		}
	}
	if redacted {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Open connects to the database named by dsn (a postgres:// URL) and brings
// its schema up to date. Replicas may call it at the same moment.
func Open(ctx context.Context, dsn string) (*Store, error) {
	redacted := Redact(dsn)
	if !IsDSN(dsn) {
		return nil, fmt.Errorf("opening postgres store: unsupported database URL (%s); try one with a postgres:// scheme", redacted)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("opening postgres store %s: %w", redacted, err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	params := cfg.ConnConfig.RuntimeParams
	if params["application_name"] == "" {
		params["application_name"] = "automator"
	}
	if params["idle_in_transaction_session_timeout"] == "" {
		params["idle_in_transaction_session_timeout"] = idleInTransactionTimeout
	}
	for k, v := range deadPeerSettings {
		if params[k] == "" {
			params[k] = v
		}
	}
	listenConfig := cfg.ConnConfig.Copy()
	listenConfig.RuntimeParams["application_name"] = params["application_name"] + " listen"

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening postgres store %s: %w", redacted, err)
	}
	from, to, err := migrate(ctx, pool)
	if err != nil {
		pool.Close()
		// A command run by hand lacks the PGPASSWORD of the replicas'
		// environment: PostgreSQL says only that authentication failed.
		if code, _ := pgCode(err); code == codeInvalidPassword && cfg.ConnConfig.Password == "" {
			return nil, fmt.Errorf("opening postgres store %s: %w; no password was given (the URL has none, and neither PGPASSWORD nor a password file, ~/.pgpass or PGPASSFILE, supplies one): give it as PGPASSWORD in this command's environment", redacted, err)
		}
		// Said as such, not as the driver's words alone (a review):
		// only a dial that failed (a refusal, no route, a name that does
		// not resolve), not a server that answered and refused (TLS, say:
		// a re-review).
		if unreached(err) {
			return nil, fmt.Errorf("opening postgres store %s: PostgreSQL could not be reached (%w): start it, or mend the host and port of db", redacted, err)
		}
		return nil, fmt.Errorf("opening postgres store %s: %w", redacted, err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("opening postgres store %s: reading the schema: %w", redacted, err)
	}
	s := &Store{
		pool:         pool,
		listenConfig: listenConfig,
		channel:      channelFor(schema),
		origin:       randomID(),
		redacted:     redacted,
		heard:        time.Now(),
		migrated:     [2]int{from, to},
		writeTimeout: groupTimeout,
		listenSetup:  defaultListenSetup,
		holdWait:     defaultHoldWait,
		holdPing:     defaultHoldPing,
		holdTimeout:  defaultHoldTimeout,
	}
	s.initGrouper(&s.group)
	s.initGrouper(&s.reads)
	return s, nil
}

// Migrated returns the version of the database's schema before Open
// brought it up to date, 0 when Open made it, and after: the same when it
// was current.
func (s *Store) Migrated() (from, to int) { return s.migrated[0], s.migrated[1] }

// Close closes the pool. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}

// channelFor names the NOTIFY channel of the automators using one schema.
// Channels are global to a database, so automators in two schemas of one
// database must not hear each other.
func channelFor(schema string) string {
	if schema == "public" {
		return "automator_events"
	}
	h := sha256.Sum256([]byte(schema))
	return "automator_events_" + hex.EncodeToString(h[:8])
}

func randomID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// inTx runs fn in one transaction and commits it when fn returns nil.
// Once begun, the transaction runs to its end whatever becomes of ctx
// (see Store.sent): fn must use the ctx it is given. A transaction that
// PostgreSQL rolled back to break a deadlock (or a serialization failure)
// is run again, txAttempts in all: it changed nothing, and the next
// attempt finds the other transaction done. So fn may run more than once,
// and must set what it returns afresh each time.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.sentAgain(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return fn(ctx, tx) })
	})
}

// txAttempts bounds the runs of one transaction or statement (sentAgain).
const txAttempts = 3

// PostgreSQL error codes the store turns into sentinels.
const (
	codeUniqueViolation     = "23505"
	codeInvalidPassword     = "28P01"
	codeForeignKeyViolation = "23503"
	// Rolled back by PostgreSQL for another transaction's sake: sentAgain
	// runs the statement or transaction again.
	codeDeadlockDetected     = "40P01"
	codeSerializationFailure = "40001"
)

// unreached reports whether err, of a connection to PostgreSQL, is that
// no server could be reached: its dial failed, or its name does not
// resolve.
func unreached(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}

func pgCode(err error) (code, constraint string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr.ConstraintName
	}
	return "", ""
}

// nonNil turns a nil slice into an empty one: pgx sends nil as NULL, and
// the NOT NULL bytea columns want an empty value instead.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// fromNull turns a scanned nullable timestamptz into a time (zero for NULL),
// in UTC like the SQLite backend's.
func fromNull(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// rowTo adapts a single-row scanner to pgx.CollectRows.
func rowTo[T any](scan func(pgx.Row) (T, error)) pgx.RowToFunc[T] {
	return func(r pgx.CollectableRow) (T, error) { return scan(r) }
}
