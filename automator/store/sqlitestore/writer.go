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

// A write's lifecycle: queued until the writer takes it, or abandoned by a
// caller whose context ended first (then it never runs). Once taken it runs
// to its end and its caller waits for the outcome: a write the caller gave
// up on might otherwise commit unseen.
const (
	opQueued int32 = iota
	opTaken
	opAbandoned
	opLeading // made the next leader: it runs
)

type writeOp struct {
	ctx context.Context
	fn  func(ctx context.Context, tx querier) error
	// syncLater: the write may be answered before it is on disk (see
	// store.WorkEnqueueParams.SyncLater). A batch of such writes only
	// commits without an fsync; the next durable commit syncs it.
	syncLater bool
	state     atomic.Int32
	done      chan error    // capacity 1: the outcome
	lead      chan struct{} // capacity 1: this caller commits the next batch
}

type writer struct {
	db     *sql.DB    // the write pool: exactly one connection
	syncer *walSyncer // fsyncs the WAL after a commit without one

	mu      sync.Mutex
	queue   []*writeOp // handed over, not yet taken, oldest first
	leading bool       // a caller is committing a batch (it owns conn)
	closed  bool
	idle    *sync.Cond // signalled when leading ends with nothing queued

	// commits counts the transactions committed (for tests); lastLazy
	// and lastDurable are the numbers of the latest commit without and
	// with an fsync.
	commits     atomic.Int64
	lastLazy    atomic.Int64
	lastDurable atomic.Int64

	// Owned by the leading caller.
	conn *sql.Conn
	q    *prepared
	lazy bool // the connection runs with synchronous=NORMAL
}

func newWriter(db *sql.DB, path string) *writer {
	w := &writer{db: db}
	w.syncer = newWALSyncer(path, walSyncDelay, w.lastLazy.Load, w.lastDurable.Load)
	w.idle = sync.NewCond(&w.mu)
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
// commits the batch itself (its own write first, with every write waiting
// by then), so a lone write costs no hand-over between goroutines. When it
// is done, it hands the lead to the oldest write that waits, whose caller
// commits the next batch, and so on; the last one leaves the lead free.
func (s *Store) write1(ctx context.Context, syncLater bool, fn func(ctx context.Context, tx querier) error) error {
	w := s.w
	o := &writeOp{ctx: ctx, fn: fn, syncLater: syncLater, done: make(chan error, 1), lead: make(chan struct{}, 1)}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errClosed
	}
	w.queue = append(w.queue, o)
	if !w.leading {
		w.leading = true
		w.mu.Unlock()
		w.lead()
		return <-o.done
	}
	w.mu.Unlock()
	for {
		select {
		case err := <-o.done:
			return err
		case <-o.lead:
			w.lead()
			return <-o.done
		case <-ctx.Done():
			if o.state.CompareAndSwap(opQueued, opAbandoned) {
				return ctx.Err()
			}
			// Taken, or made the next leader: what happens is what it
			// returns.
			ctx = context.Background()
		}
	}
}

// lead commits one batch (the oldest writes waiting, up to maxBatch), then
// hands the lead to the oldest write still waiting or leaves it free.
func (w *writer) lead() {
	w.mu.Lock()
	n := min(len(w.queue), maxBatch)
	batch := append([]*writeOp(nil), w.queue[:n]...)
	w.queue = w.queue[n:]
	w.mu.Unlock()
	w.commit(batch)

	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) > 0 {
		next := w.queue[0]
		if next.state.CompareAndSwap(opQueued, opLeading) {
			next.lead <- struct{}{}
			return
		}
		w.queue = w.queue[1:] // abandoned by its caller
	}
	w.leading = false
	w.idle.Broadcast()
}

// close lets the writes handed over already commit, then refuses new ones
// and gives the connection back to the pool.
func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	for w.leading {
		w.idle.Wait()
	}
	w.release()
	w.mu.Unlock()
	w.syncer.close()
}

// commit runs a batch in one transaction and answers each write.
func (w *writer) commit(batch []*writeOp) {
	live := make([]*writeOp, 0, len(batch))
	for _, o := range batch {
		if o.state.CompareAndSwap(opQueued, opTaken) || o.state.CompareAndSwap(opLeading, opTaken) {
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
