package sqlitestore

import (
	"os"
	"sync/atomic"
)

// walSyncer makes writes committed without an fsync (synchronous=NORMAL, for
// writes whose callers may be answered before they are on disk) durable soon
// after: on each kick it fsyncs the WAL file, and with it every frame
// appended so far, off the writer's path. Such a write is thus on disk
// about one fsync after its commit, or sooner with the next durable commit.
type walSyncer struct {
	path   string
	kick   chan struct{} // capacity 1: a sync is due
	quit   chan struct{}
	exited chan struct{}

	syncs  atomic.Int64 // fsyncs done (for tests)
	onSync func()       // called after each fsync (for tests; set before any write)
}

func newWALSyncer(dbPath string) *walSyncer {
	y := &walSyncer{
		path:   dbPath + "-wal",
		kick:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
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
	defer close(y.exited)
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		select {
		case <-y.kick:
		case <-y.quit:
			select {
			case <-y.kick:
			default:
				return
			}
		}
		if f == nil {
			var err error
			// SQLite keeps the WAL file while the database is open in WAL
			// mode; if it cannot be opened, the next durable commit syncs.
			if f, err = os.OpenFile(y.path, os.O_RDWR, 0); err != nil {
				f = nil
				continue
			}
		}
		if f.Sync() == nil {
			y.syncs.Add(1)
			if y.onSync != nil {
				y.onSync()
			}
		}
	}
}
