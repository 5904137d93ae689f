package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"sync/atomic"

	"github.com/opsgate/opsgate/internal/batch"
)

// Group commit.
//
// Every write of the store is a function run on the single write
// connection by whichever caller leads at the moment (write1). The leader
// takes every write that is waiting, runs them one after another in one
// IMMEDIATE transaction, each inside a savepoint of its own (a write that fails is
// rolled back alone and gets its own error), commits once, and only then
// answers each of them. One fsync thus makes a whole batch durable, and
// writes that arrive while a batch commits form the next one: under load
// the batches grow by themselves, and a lone write is committed at once.
//
// Durability is what it was: no write is answered before the commit that
// holds it is on disk, so a claim is durable before the proxy sees it and a
// completion before the caller does.

// maxBatch bounds the writes committed together, so that one batch holds
// the write connection for a bounded time.
const maxBatch = 256

// errClosed answers writes made after Close.
var errClosed = errors.New("the store is closed")

// errRollback ends a batch of one write whose function failed.
var errRollback = errors.New("rolled back")

type writeOp struct {
	ctx context.Context
	fn  func(ctx context.Context, tx querier) error
	// syncLater: the write may be answered before it is on disk (see
	// store.WorkEnqueueParams.SyncLater). A batch of such writes only
	// commits without an fsync; the next durable commit syncs it.
	syncLater bool
}

type writer struct {
	db     *sql.DB    // the write pool: exactly one connection
	syncer *walSyncer // fsyncs the WAL after a commit without one

	// group runs the batches (commit), one at a time, each on the
	// goroutine of its oldest caller. A write whose caller gives up while
	// it waits never runs; once taken, it runs to its end and its caller
	// waits for the outcome: a write the caller gave up on might otherwise
	// commit unseen.
	group batch.Group[*writeOp]

	// commits counts the transactions committed (for tests); lastLazy
	// and lastDurable are the numbers of the latest commit without and
	// with an fsync.
	commits     atomic.Int64
	lastLazy    atomic.Int64
	lastDurable atomic.Int64

	// Owned by the batch being committed.
	conn *sql.Conn
	q    *prepared
	lazy bool // the connection runs with synchronous=NORMAL
}

func newWriter(db *sql.DB, path string) *writer {
	w := &writer{db: db}
	w.syncer = newWALSyncer(path, walSyncDelay, w.lastLazy.Load, w.lastDurable.Load)
	w.group.Run = w.commit
	w.group.MaxItems = maxBatch
	return w
}

// writeTx runs fn as one write of the next batch and returns when the batch
// that holds it has committed (nil) or fn's error when fn failed (nothing
// of fn's is kept). fn must use the ctx and tx it is given: ctx carries the
// caller's values but never ends, since interrupting a statement would
// roll back the other writes of the batch.
func (s *Store) writeTx(ctx context.Context, fn func(ctx context.Context, tx querier) error) error {
	return s.write1(ctx, false, fn)
}

// write1 is writeTx, with syncLater for a write that may be answered before
// it is on disk.
//
// There is no writer goroutine: the caller that finds nobody committing
// commits the batch itself, so a lone write costs no hand-over between
// goroutines; writes made meanwhile are committed together by the oldest of
// their callers (internal/batch).
func (s *Store) write1(ctx context.Context, syncLater bool, fn func(ctx context.Context, tx querier) error) error {
	if err := ctx.Err(); err != nil {
		// Done already: nothing is written (a write that would lead its
		// batch at once would otherwise run).
		return err
	}
	err := s.w.group.Do(ctx, &writeOp{ctx: ctx, fn: fn, syncLater: syncLater})
	if err != nil {
		// A file this user may not write is named, with what to do:
		// SQLite's "attempt to write a readonly database" names none
		// (a review: account create on a database made read only).
		return notWritable(outOfSpace(err, filepath.Dir(s.path)), s.path)
	}
	return nil
}

// BatchStats reports the writes committed together so far, as group
// "write": each batch is one transaction and one fsync (or none, for a
// batch of SyncLater writes only).
func (s *Store) BatchStats() map[string]batch.Stats {
	return map[string]batch.Stats{"write": s.w.group.Stats()}
}

// close lets the writes handed over already commit, then refuses new ones
// and gives the connection back to the pool.
func (w *writer) close() {
	w.group.Close(errClosed)
	w.release()
	w.syncer.close()
}

// commit runs a batch in one transaction and returns each write's outcome.
func (w *writer) commit(batch []*writeOp) []error {
	lazy := true
	for _, o := range batch {
		lazy = lazy && o.syncLater
	}
	errs := make([]error, len(batch))
	err := w.inTx(lazy, func(q querier) error {
		if len(batch) == 1 {
			if errs[0] = batch[0].fn(context.WithoutCancel(batch[0].ctx), q); errs[0] != nil {
				return errRollback
			}
			return nil
		}
		bg := context.Background()
		for i, o := range batch {
			if _, err := q.ExecContext(bg, "SAVEPOINT w"); err != nil {
				return err
			}
			if errs[i] = o.fn(context.WithoutCancel(o.ctx), q); errs[i] != nil {
				if _, err := q.ExecContext(bg, "ROLLBACK TO w"); err != nil {
					return err
				}
			}
			if _, err := q.ExecContext(bg, "RELEASE w"); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && lazy {
		w.syncer.soon()
	}
	for i := range errs {
		if errs[i] == nil && err != nil {
			errs[i] = err // the batch did not commit: neither did this write
		}
	}
	return errs
}

// inTx runs fn in one IMMEDIATE transaction on the writer's connection and
// commits it when fn returns nil; durably (synchronous=FULL, the
// connection's setting) unless lazy.
func (w *writer) inTx(lazy bool, fn func(q querier) error) error {
	ctx := context.Background()
	if w.conn == nil {
		c, err := w.db.Conn(ctx)
		if err != nil {
			return err
		}
		w.conn, w.q, w.lazy = c, newPrepared(c), false
	}
	if lazy != w.lazy {
		mode := "PRAGMA synchronous = FULL"
		if lazy {
			mode = "PRAGMA synchronous = NORMAL"
		}
		if _, err := w.q.ExecContext(ctx, mode); err != nil {
			w.discard()
			return err
		}
		w.lazy = lazy
	}
	if _, err := w.q.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		w.discard()
		return err
	}
	if err := fn(w.q); err != nil {
		w.rollback()
		return err
	}
	if _, err := w.q.ExecContext(ctx, "COMMIT"); err != nil {
		// SQLite either kept the transaction open (busy) or rolled it
		// back; either way nothing of it is committed.
		w.rollback()
		return err
	}
	if n := w.commits.Add(1); lazy {
		w.lastLazy.Store(n)
	} else {
		w.lastDurable.Store(n)
	}
	return nil
}

func (w *writer) rollback() {
	if _, err := w.q.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		// SQLite may have rolled back on its own already; whatever the
		// cause, a fresh connection leaves nothing in doubt.
		w.discard()
	}
}

// discard drops the connection (the pool closes it) and its statements; the
// next batch opens a fresh one.
func (w *writer) discard() {
	if w.conn == nil {
		return
	}
	w.q.close()
	_ = w.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = w.conn.Close()
	w.conn, w.q = nil, nil
}

// release gives the connection back to the pool.
func (w *writer) release() {
	if w.conn == nil {
		return
	}
	w.q.close()
	_ = w.conn.Close()
	w.conn, w.q = nil, nil
}
