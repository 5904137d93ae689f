package pgstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit.
//
// The two writes every unit makes (its enqueue and its completion) are one
// statement each, which alone would be one transaction each: one commit,
// one WAL flush and one round trip per write. So writes made at the same
// moment share a transaction. One batch of writes is on its way at a time
// (maxGroupWriters): a write made while none is goes at once, alone, on its
// caller's goroutine, and the writes made while one is wait for it and
// then go together: one pipeline of their statements ending in one Sync,
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

// maxGroupWriters bounds the batches of one Store on their way at once.
// One made the most of each commit in the bench (docs/performance.md):
// with two or four the batches were smaller and PostgreSQL's work per unit
// greater.
const maxGroupWriters = 1

// maxGroup bounds the writes of one batch.
const maxGroup = 128

// groupTimeout bounds one batch of several writes, whose callers each stop
// waiting when their own context ends.
const groupTimeout = 30 * time.Second

// groupWrite is one single-row statement of a batch.
type groupWrite struct {
	ctx  context.Context
	sql  string
	args []any
	// scan reads the statement's row (pgx.ErrNoRows when it returned
	// none) and returns what the write returns to its caller.
	scan func(pgx.Row) error
	err  error

	// wake receives the batch this write's goroutine must send (it leads
	// it), or nil once the write is done.
	wake chan []*groupWrite
}

// grouper gathers the writes of one Store into batches.
type grouper struct {
	mu      sync.Mutex
	waiting []*groupWrite // made while maxGroupWriters were busy, oldest first
	writers int           // batches on their way

	// testHook, when set, is called with the lock held each time a write
	// starts a batch or waits; testHookSend, when set, before each batch is
	// sent, with its size.
	testHook     func(writers, waiting int)
	testHookSend func(n int)
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
	w := &groupWrite{ctx: ctx, sql: sql, args: args, scan: scan}
	g.mu.Lock()
	if g.writers < maxGroupWriters {
		g.writers++
		if g.testHook != nil {
			g.testHook(g.writers, len(g.waiting))
		}
		g.mu.Unlock()
		s.lead(g, []*groupWrite{w})
		return w.err
	}
	w.wake = make(chan []*groupWrite, 1)
	g.waiting = append(g.waiting, w)
	if g.testHook != nil {
		g.testHook(g.writers, len(g.waiting))
	}
	g.mu.Unlock()

	var batch []*groupWrite
	select {
	case batch = <-w.wake:
	case <-ctx.Done():
		g.mu.Lock()
		if i := slices.Index(g.waiting, w); i >= 0 {
			g.waiting = slices.Delete(g.waiting, i, i+1)
			g.mu.Unlock()
			return ctx.Err()
		}
		g.mu.Unlock()
		// Already taken into a batch: it runs, and this goroutine may be
		// the one to send it.
		batch = <-w.wake
	}
	if batch != nil {
		s.lead(g, batch)
	}
	return w.err
}

// lead sends batch (its first write is the caller's own), then hands the
// writes that waited meanwhile to one of them to send, and answers the
// others of batch.
func (s *Store) lead(g *grouper, batch []*groupWrite) {
	if g.testHookSend != nil {
		g.testHookSend(len(batch))
	}
	s.send(batch)
	g.mu.Lock()
	var next []*groupWrite
	if len(g.waiting) > 0 {
		n := min(len(g.waiting), maxGroup)
		next = slices.Clone(g.waiting[:n])
		g.waiting = slices.Delete(g.waiting, 0, n)
	} else {
		g.writers--
	}
	g.mu.Unlock()
	if next != nil {
		next[0].wake <- next
	}
	for _, w := range batch[1:] {
		w.wake <- nil
	}
}

// send runs the writes of batch and sets each one's err.
func (s *Store) send(batch []*groupWrite) {
	if len(batch) == 1 {
		w := batch[0]
		w.err = w.scan(s.pool.QueryRow(w.ctx, w.sql, w.args...))
		return
	}
	// No one caller's context may cut the others' batch short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), groupTimeout)
	defer cancel()
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(batch))}
	for _, w := range batch {
		b.Queue(w.sql, w.args...)
	}
	br := s.pool.SendBatch(ctx, b)
	var failed error
	for _, w := range batch {
		w.err = w.scan(br.QueryRow())
		if failed == nil && w.err != nil && !errors.Is(w.err, pgx.ErrNoRows) {
			failed = w.err
		}
	}
	if err := br.Close(); failed == nil {
		failed = err
	}
	if failed == nil {
		return
	}
	if !refusedStatement(failed) {
		// The connection failed or the session ended: whether the batch
		// committed is unknown.
		for _, w := range batch {
			w.err = failed
		}
		return
	}
	// The server refused a statement and rolled the batch back: each
	// write again alone, so that only the one at fault fails.
	for _, w := range batch {
		w.err = w.scan(s.pool.QueryRow(w.ctx, w.sql, w.args...))
	}
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
