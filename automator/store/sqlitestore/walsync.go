package sqlitestore

import (
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// walSyncDelay is how long after a commit without an fsync the syncer
// waits before it fsyncs the WAL itself. A durable commit within it (such
// as the claim of the unit just queued) syncs the WAL anyway, and then the
// syncer has nothing to do: its fsync would only have delayed that commit's,
// which waits for it on the same file.
const walSyncDelay = 5 * time.Millisecond

// walSyncer makes writes committed without an fsync (synchronous=NORMAL, for
// writes whose callers may be answered before they are on disk) durable soon
// after: walSyncDelay after a kick it fsyncs the WAL file, and with it every
// frame appended so far, off the writer's path, unless a durable commit
// after the last commit without an fsync did it meanwhile (covered). Such a
// write is thus on disk within about walSyncDelay and one fsync of its
// commit.
type walSyncer struct {
	path  string
	delay time.Duration
	// lastLazy and lastDurable give the numbers of the writer's latest
	// commit without and with an fsync.
	lastLazy, lastDurable func() int64
	kick                  chan struct{} // capacity 1: a sync is due
	quit                  chan struct{}
	exited                chan struct{}

	mu     sync.Mutex // held by an fsync (sync)
	f      *os.File   // the WAL, opened by the first fsync
	synced int64      // the latest lazy commit an fsync of this syncer covered
	closed bool       // run has ended: sync closes the file it opens

	syncs  atomic.Int64 // fsyncs done (for tests)
	onSync func()       // called after each fsync (for tests; set before any write)
}

func newWALSyncer(dbPath string, delay time.Duration, lastLazy, lastDurable func() int64) *walSyncer {
	y := &walSyncer{
		path:        dbPath + "-wal",
		delay:       delay,
		lastLazy:    lastLazy,
		lastDurable: lastDurable,
		kick:        make(chan struct{}, 1),
		quit:        make(chan struct{}),
		exited:      make(chan struct{}),
	}
	go y.run()
	return y
}

// soon asks for an fsync of the WAL after what was committed until now.
func (y *walSyncer) soon() {
	select {
	case y.kick <- struct{}{}:
	default: // one is due already, and it will cover this commit too
	}
}

// close does a sync still due, then stops.
func (y *walSyncer) close() {
	close(y.quit)
	<-y.exited
}

func (y *walSyncer) run() {
	defer func() {
		y.mu.Lock()
		defer y.mu.Unlock()
		if y.f != nil {
			y.f.Close()
			y.f = nil
		}
		y.closed = true
		close(y.exited)
	}()
	wait := time.NewTimer(time.Hour) // armed after each kick
	wait.Stop()
	for {
		quitting := false
		select {
		case <-y.kick:
		case <-y.quit:
			select {
			case <-y.kick:
				quitting = true
			default:
				return
			}
		}
		if !quitting {
			wait.Reset(y.delay)
			select {
			case <-wait.C:
			case <-y.quit:
				wait.Stop()
			}
		}
		// If the WAL cannot be opened or synced, the next durable commit
		// syncs it.
		_ = y.sync()
	}
}

// sync makes every commit made so far durable before it returns: it
// fsyncs the WAL, and with it every frame appended so far, unless each
// commit without an fsync is on disk already (synced by an earlier call, or
// followed by a durable commit). The background syncer calls it, and so
// does a write that answers with a unit another write committed without an
// fsync (WorkEnqueue's duplicate).
func (y *walSyncer) sync() error {
	y.mu.Lock()
	defer y.mu.Unlock()
	upTo := y.lastLazy()
	if upTo <= y.synced || upTo < y.lastDurable() {
		return nil // on disk already
	}
	if y.f == nil {
		// SQLite keeps the WAL file while the database is open in WAL
		// mode.
		f, err := os.OpenFile(y.path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		y.f = f
	}
	err := y.f.Sync()
	if y.closed {
		y.f.Close()
		y.f = nil
	}
	if err != nil {
		return err
	}
	y.synced = upTo
	y.syncs.Add(1)
	if y.onSync != nil {
		y.onSync()
	}
	return nil
}
