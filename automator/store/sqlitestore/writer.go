package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
)

// Group commit.
//
// Every write of the store is a function run by one writer goroutine, which
// owns the single write connection. The writer takes every write that is
// waiting when it is free, runs them one after another in one IMMEDIATE
// transaction, each inside a savepoint of its own (a write that fails is
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

// A write's lifecycle: queued until the writer takes it, or abandoned by a
// caller whose context ended first (then it never runs). Once taken it runs
// to its end and its caller waits for the outcome: a write the caller gave
// up on might otherwise commit unseen.
const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

type writeOp struct {
	ctx context.Context
	fn  func(ctx context.Context, tx querier) error
	// syncLater: the write may be answered before it is on disk (see
	// store.WorkEnqueueParams.SyncLater). A batch of such writes only
	// commits without an fsync; the next durable commit syncs it.
	syncLater bool
	state     atomic.Int32
	done      chan error // capacity 1: the outcome
}

type writer struct {
	db     *sql.DB // the write pool: exactly one connection
	ops    chan *writeOp
	syncer *walSyncer // fsyncs the WAL after a commit without one

	mu     sync.RWMutex // held for reading while a write is handed over
	closed bool
	quit   chan struct{}
	exited chan struct{}

	// commits counts the transactions committed (for tests).
	commits atomic.Int64

	// Owned by the writer goroutine.
	conn *sql.Conn
	q    *prepared
	lazy bool // the connection runs with synchronous=NORMAL
}

func newWriter(db *sql.DB, path string) *writer {
	w := &writer{
		db:     db,
		syncer: newWALSyncer(path),
		ops:    make(chan *writeOp, maxBatch),
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go w.run()
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
func (s *Store) write1(ctx context.Context, syncLater bool, fn func(ctx context.Context, tx querier) error) error {
	o := &writeOp{ctx: ctx, fn: fn, syncLater: syncLater, done: make(chan error, 1)}
	if err := s.w.submit(ctx, o); err != nil {
		return err
	}
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opAbandoned) {
			return ctx.Err()
		}
		return <-o.done // taken already: its outcome is what happened
	}
}

func (w *writer) submit(ctx context.Context, o *writeOp) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return errClosed
	}
	select {
	case w.ops <- o:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close commits what was handed over already, then stops the writer and
// gives its connection back to the pool.
func (w *writer) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.exited
		return
	}
	w.closed = true
	close(w.quit)
	w.mu.Unlock()
	<-w.exited
	w.syncer.close()
}

func (w *writer) run() {
	defer close(w.exited)
	defer w.release()
	batch := make([]*writeOp, 0, maxBatch)
	for {
		select {
		case o := <-w.ops:
			batch = append(batch[:0], o)
		case <-w.quit:
			// No write is handed over any more: commit what is left.
			for {
				batch = w.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				w.commit(batch)
			}
		}
		w.commit(w.fill(batch))
	}
}

// fill adds the writes waiting now, up to maxBatch.
func (w *writer) fill(batch []*writeOp) []*writeOp {
	for len(batch) < maxBatch {
		select {
		case o := <-w.ops:
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

// commit runs a batch in one transaction and answers each write.
func (w *writer) commit(batch []*writeOp) {
	live := make([]*writeOp, 0, len(batch))
	for _, o := range batch {
		if o.state.CompareAndSwap(opQueued, opTaken) {
			live = append(live, o)
		}
	}
	if len(live) == 0 {
		return
	}
	lazy := true
	for _, o := range live {
		lazy = lazy && o.syncLater
	}
	errs := make([]error, len(live))
	err := w.inTx(lazy, func(q querier) error {
		if len(live) == 1 {
			if errs[0] = live[0].fn(context.WithoutCancel(live[0].ctx), q); errs[0] != nil {
				return errRollback
			}
			return nil
		}
		bg := context.Background()
		for i, o := range live {
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
	for i, o := range live {
		e := errs[i]
		if e == nil && err != nil {
			e = err // the batch did not commit: neither did this write
		}
		o.done <- e
	}
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
	w.commits.Add(1)
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
