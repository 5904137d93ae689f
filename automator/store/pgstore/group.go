package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/batch"
)

// Group commit.
//
// The two writes every unit makes (its enqueue and its completion) are one
// statement each, which alone would be one transaction each: one commit,
// one WAL flush and one round trip per write. So writes made at the same
// moment share a transaction. One batch of writes is on its way at a time:
// a write made while none is goes at once, alone, on its caller's
// goroutine, and the writes made while one is wait for it and then go
// together: one pipeline of their statements ending in one Sync,
// which PostgreSQL runs as one implicit transaction. Under load the
// batches grow by themselves; a lone write is never delayed.
//
// Durability is what it was: a write is answered only once the transaction
// holding it has committed, with the server's synchronous_commit.
//
// A statement that fails in a batch rolls the whole batch back (that is
// what an implicit transaction does, whichever query mode pgx uses: a
// pipeline ending in one Sync, or one multi-statement query in the simple
// protocol). Then each of its writes runs again alone, and the one that
// failed gets its own error, as if there had been no batch. A batch whose
// outcome is unknown (its connection failed, or its session ended: a
// FATAL error can come after the commit) gives every write that error: as
// for a single statement, the write may or may not have committed.
//
// Reads of single units (WorkGet) go through the same machinery, in a
// grouper of their own (Store.reads), so that they never wait behind a
// batch of writes: a batch of them is a pipeline of SELECTs, one round
// trip. The names below say "write" for either.

// maxGroup bounds the writes of one batch.
const maxGroup = 128

// groupTimeout bounds a write once sent, alone or in a batch: from then on
// no caller's context cuts it short (its callers wait for the outcome).
// It is Store.writeTimeout, which tests may shorten.
const groupTimeout = 30 * time.Second

// groupWrite is one single-row statement of a batch.
type groupWrite struct {
	ctx  context.Context
	sql  string
	args []any
	// scan reads the statement's row (pgx.ErrNoRows when it returned
	// none) and returns what the write returns to its caller.
	scan func(pgx.Row) error
}

// grouper gathers the writes of one Store into batches: one batch on its
// way at a time (one made the most of each commit in the bench, see
// docs/performance.md: with two or four the batches were smaller and
// PostgreSQL's work per unit greater), sent on the goroutine of its oldest
// write's caller (internal/batch). A write whose caller gives up while it
// waits never runs; once taken into a batch it runs, and its caller waits
// for the outcome.
type grouper struct {
	batch.Group[*groupWrite]

	// testHookSend, when set, is called before each batch is sent, with
	// its size.
	testHookSend func(n int)
}

func (s *Store) initGrouper(g *grouper) {
	g.MaxItems = maxGroup
	g.Run = func(batch []*groupWrite) []error {
		if g.testHookSend != nil {
			g.testHookSend(len(batch))
		}
		return s.send(batch)
	}
}

// BatchStats reports the statements sent together so far: the writes as
// group "write", the reads of single units as group "read"; each batch is
// one pipeline.
func (s *Store) BatchStats() map[string]batch.Stats {
	return map[string]batch.Stats{"write": s.group.Stats(), "read": s.reads.Stats()}
}

// write runs one single-row statement, alone or in a batch, and returns
// what scan returned; or ctx's error if ctx ended while the write waited
// for its batch to start (it then never runs).
func (s *Store) write(ctx context.Context, sql string, args []any, scan func(pgx.Row) error) error {
	return s.gather(&s.group, ctx, sql, args, scan)
}

// gather runs one single-row statement through g, alone or in a batch:
// the writes (s.group, above) and the reads of single units (s.reads,
// WorkGet: with several replicas, the callers waiting on one replica read
// back the units another completed, a burst at each batch of
// notifications).
func (s *Store) gather(g *grouper, ctx context.Context, sql string, args []any, scan func(pgx.Row) error) error {
	if err := ctx.Err(); err != nil {
		// Done already: nothing is sent (a write that would lead its batch
		// at once would otherwise run).
		return err
	}
	return g.Do(ctx, &groupWrite{ctx: ctx, sql: sql, args: args, scan: scan})
}

// send runs the writes of batch and returns each one's outcome.
func (s *Store) send(batch []*groupWrite) []error {
	errs := make([]error, len(batch))
	if len(batch) == 1 {
		errs[0] = s.sendAlone(batch[0])
		return errs
	}
	// No one caller's context may cut the others' batch short.
	ctx, cancel := s.detach(batch[0].ctx)
	defer cancel()
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(batch))}
	for _, w := range batch {
		b.Queue(w.sql, w.args...)
	}
	br := s.pool.SendBatch(ctx, b)
	var failed error
	for i, w := range batch {
		errs[i] = w.scan(br.QueryRow())
		if failed == nil && errs[i] != nil && !errors.Is(errs[i], pgx.ErrNoRows) {
			failed = errs[i]
		}
	}
	if err := br.Close(); failed == nil {
		failed = err
	}
	if failed == nil {
		return errs
	}
	failed = s.noAnswer(ctx, failed)
	if !refusedStatement(failed) {
		// The connection failed or the session ended: whether the batch
		// committed is unknown.
		for i := range errs {
			errs[i] = failed
		}
		return errs
	}
	// The server refused a statement and rolled the batch back: each
	// write again alone, so that only the one at fault fails.
	for i, w := range batch {
		errs[i] = s.sendAlone(w)
	}
	return errs
}

// sendAlone runs one write as a statement of its own, again when
// PostgreSQL rolled it back for another transaction's sake (sentAgain).
// Its caller's context does not cut it short either: cut off under way,
// the statement might commit all the same, and its caller would be told
// it failed.
func (s *Store) sendAlone(w *groupWrite) error {
	ctx, cancel := s.detach(w.ctx)
	defer cancel()
	return s.noAnswer(ctx, runAgain(func() error { return w.scan(s.pool.QueryRow(ctx, w.sql, w.args...)) }))
}

// noAnswer is err, from a call run under dctx (detach), said to be the
// database's silence when dctx's own bound ran out: the database is out of
// reach or stalled, and the call may have taken effect or not, as when its
// connection fails (store.ErrUnavailable). The bound is a context's
// deadline, which on its own reads as a caller that gave up.
func (s *Store) noAnswer(dctx context.Context, err error) error {
	if err != nil && dctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: no answer within %v: %w", store.ErrUnavailable, s.writeTimeout, err)
	}
	return err
}

// detach is the context of a write once sent: ctx's values, without its
// cancellation, bounded by groupTimeout (s.writeTimeout).
func (s *Store) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
}

// sent runs fn, the statements of a write that does not go through the
// grouper (a claim, a cancel, a transaction: see inTx; every other write,
// through sentExec), on a connection of its own, and runs it
// to its end as a lone write is run: ctx bounds only
// the wait for the connection, before anything is sent (a ctx done already
// sends nothing), and fn's context is detach(ctx). Cut off under way, a
// claim could commit all the same: its units would stay claimed by an
// instance that never received them, until their deadline, and the poll
// would be told the claim failed.
func (s *Store) sent(ctx context.Context, fn func(ctx context.Context, c *pgxpool.Conn) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	if err := ctx.Err(); err != nil {
		return err
	}
	dctx, cancel := s.detach(ctx)
	defer cancel()
	return s.noAnswer(dctx, fn(dctx, c))
}

// sentAgain is sent, fn run again, txAttempts in all, when PostgreSQL
// rolled it back to break a deadlock (or for a serialization failure): it
// changed nothing, and the next run finds the other transaction done. For
// a write that is one statement, or one transaction (inTx), whose fn sets
// what it returns afresh each run. A lone statement meets deadlocks too:
// a claim's or completion's UPDATE waiting on an enqueue's insertion of a
// unit with the same id, sent again to another replica, while that
// insertion waits on the UPDATE's transaction in its check of the
// idempotency key (a randomized test of the store's contract: the poll or
// the result was answered Internal).
func (s *Store) sentAgain(ctx context.Context, fn func(ctx context.Context, c *pgxpool.Conn) error) error {
	return s.sent(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		return runAgain(func() error { return fn(ctx, c) })
	})
}

// runAgain runs fn, and again, txAttempts in all, while PostgreSQL rolls it
// back for another transaction's sake (sentAgain, sendAlone). It waits a
// moment before each run again (10 to 50 ms times the attempt): run again
// at once, a write could take the row it freed before the other
// transaction's backend woke to take it, and meet the same deadlock, every
// attempt (a re-review: three in a row).
func runAgain(fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if attempt == txAttempts || !rolledBackForAnother(err) {
			return err
		}
		time.Sleep(time.Duration(attempt) * (10*time.Millisecond + rand.N(40*time.Millisecond)))
	}
}

// rolledBackForAnother reports whether err is PostgreSQL rolling back a
// statement or transaction for another transaction's sake: a deadlock
// broken, or a serialization failure.
func rolledBackForAnother(err error) bool {
	code, _ := pgCode(err)
	return code == codeDeadlockDetected || code == codeSerializationFailure
}

// sentExec runs one statement as a write of its own (Store.sentAgain).
func (s *Store) sentExec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := s.sentAgain(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		var err error
		tag, err = c.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// refusedStatement reports whether err is PostgreSQL refusing a statement
// (severity ERROR: the transaction is rolled back, the session goes on),
// as opposed to a failed connection or an ended session (FATAL, PANIC).
func refusedStatement(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	// Severity is translated into the server's lc_messages; the
	// unlocalized one exists since PostgreSQL 9.6.
	severity := pgErr.SeverityUnlocalized
	if severity == "" {
		severity = pgErr.Severity
	}
	return severity == "ERROR"
}
