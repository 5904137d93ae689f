// Package acceptwait keeps a server's listeners from taking the last file
// descriptors its process may open, and accepting through a shortage of
// them.
//
// Every connection a listener accepts holds a file descriptor, and
// anyone who reaches the port can open connections. Once the process has
// as many files open as its limit allows (EMFILE), the host as many as it
// allows (ENFILE), or the host is out of memory for sockets (ENOBUFS,
// ENOMEM), Accept fails: gRPC and net/http each try again after a pause
// doubling to a second, gRPC saying nothing and net/http logging a line
// per try; and the process's own files (a database connection made again,
// a certificate read) fail as well.
//
// The listeners of one Headroom stop accepting while the process holds all
// but a reserve of the descriptors its limit allows (Reserve: an eighth of
// the limit, from 8 to 64), and accept again once some close; an accept
// that fails for a shortage anyway is tried again within Accept. The
// server above sees neither. Meanwhile the new connections wait in the
// kernel's queue (the listen backlog), the server goes on serving the
// connections it holds, and the process keeps the reserve for its own
// files. Each listener logs a shortage once when it begins and once when
// it is over.
package acceptwait

import (
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// Options configure Wrap.
type Options struct {
	// Name is the listener's in the log: "gRPC", "HTTP".
	Name string
	// Who is the process in the log: "the automator" ("the process" if
	// left out).
	Who string
	Log *slog.Logger
	// Waited, if set, is told of each time the listener waited for
	// descriptors: a try every MaxDelay at most while it lasts, or until
	// a connection of its Headroom closes.
	Waited func(time.Duration)
}

// First and MaxDelay are the pauses before the first try again and the
// longest one between tries, which double from the first. A try costs a
// system call or two: a connection waits at most MaxDelay longer than its
// turn once descriptors are free again. Quiet is how long the listener
// must have gone without waiting for the shortage to be over: at its limit
// a process frees a descriptor now and then, a connection takes it, and
// the next accept waits again, which is the same shortage, not a new one.
// Variables for tests.
var (
	First    = 5 * time.Millisecond
	MaxDelay = 250 * time.Millisecond
	Quiet    = 10 * time.Second
)

// countFiles counts the process's open descriptors: openFiles, or a
// test's.
var countFiles = openFiles

// Reserve is how many of the limit's descriptors the listeners leave to
// the process's own files: an eighth of the limit, from 8 to 64. With
// PostgreSQL the automator may open some 20 connections to the database as
// its pool makes them again, and files for its certificates and /metrics.
func Reserve(limit int) int { return min(max(limit/8, 8), 64) }

// Headroom is the account the listeners sharing a process keep of its
// file descriptors. Where the process's descriptors cannot be counted
// (outside Linux, or without /proc), it only tries failed accepts again.
type Headroom struct {
	log *slog.Logger

	mu       sync.Mutex
	off      bool          // the descriptors cannot be counted
	conns    int           // accepted by its listeners and not closed
	others   int           // the process's other descriptors, at the last count (conns + others: all of them)
	next     time.Time     // when to count them again
	counting bool          // a count is under way
	changed  chan struct{} // closed and made again when a connection closes
}

// NewHeadroom starts the account of the process's descriptors. It logs to
// log, once, if it cannot count them (no /proc), and keeps no reserve then.
func NewHeadroom(log *slog.Logger) *Headroom {
	if log == nil {
		log = slog.Default()
	}
	h := &Headroom{log: log, off: !countable, changed: make(chan struct{})}
	if !h.off {
		n, err := countFiles()
		h.counted(n, err, time.Now())
	}
	return h
}

// Counting reports whether h counts the process's descriptors, and so
// keeps a reserve of them.
func (h *Headroom) Counting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.off
}

// counted takes in a count of the process's descriptors, begun at start,
// with h.mu held.
func (h *Headroom) counted(n int, err error, start time.Time) {
	switch {
	case err == nil:
		// Below zero if conns counts connections closed unbeknown to
		// it: the count is the truth.
		h.others = n - h.conns
	case shortOfFiles(err):
		// Out of descriptors to count them with.
		if limit, ok := fileLimit(); ok {
			h.others = max(limit-h.conns, h.others)
		}
	default:
		h.off = true
		h.log.Warn("cannot count the open files of the process, so its listeners keep none of them in reserve for its own files: "+
			"they accept until it has as many open as its limit allows", "err", err)
	}
	h.next = time.Now().Add(max(MaxDelay, 100*time.Since(start)))
}

// room reports whether a connection may be accepted now, and if not what
// the process holds of its limit and a channel closed once a connection
// closes. Once the process holds half its limit, by the last count and the
// connections accepted and closed since, its descriptors are counted
// again (which takes one) at most every MaxDelay, and less often when a
// count takes long: every hundred times as long as it took (ten thousand
// descriptors took 12 ms here). Its own files are a few dozen: below half
// its limit, the count of its connections tells enough.
func (h *Headroom) room() (ok bool, held, limit int, changed <-chan struct{}) {
	limit, known := fileLimit()
	if !known {
		return true, 0, 0, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.off {
		return true, 0, 0, nil
	}
	if start := time.Now(); h.others+h.conns >= limit/2 && !start.Before(h.next) && !h.counting {
		// Counted without the lock: a count of many descriptors takes
		// milliseconds, and the connections closing meanwhile wait for it.
		h.counting = true
		h.mu.Unlock()
		n, err := countFiles()
		h.mu.Lock()
		h.counting = false
		h.counted(n, err, start)
		if h.off {
			return true, 0, 0, nil
		}
	}
	if held = h.others + h.conns; held < limit-Reserve(limit) {
		return true, 0, 0, nil
	}
	return false, held, limit, h.changed
}

// full notes an accept that failed for want of descriptors: the process
// holds as many as its limit allows, whatever the last count said.
func (h *Headroom) full() {
	limit, known := fileLimit()
	if !known {
		return
	}
	h.mu.Lock()
	if !h.off {
		h.others = max(limit-h.conns, h.others)
	}
	h.next = time.Now().Add(MaxDelay)
	h.mu.Unlock()
}

// opened and closed count a connection of h's listeners.
func (h *Headroom) opened() {
	h.mu.Lock()
	h.conns++
	h.mu.Unlock()
}

func (h *Headroom) closed() {
	h.mu.Lock()
	h.conns--
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// Wrap returns l accepting within h's headroom and through shortages.
func Wrap(l net.Listener, h *Headroom, o Options) net.Listener {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Who == "" {
		o.Who = "the process"
	}
	return &listener{Listener: l, h: h, o: o, quiet: Quiet, closed: make(chan struct{})}
}

type listener struct {
	net.Listener
	h         *Headroom
	o         Options
	quiet     time.Duration
	closed    chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	short  bool      // a shortage was logged and has not been over for quiet
	began  time.Time // its first wait
	last   time.Time // the end of its latest
	waited time.Duration
	check  *time.Timer // armed once the listener found room during it
}

// Accept returns the next connection, or the listener's error other than a
// shortage (closed, say).
func (l *listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		select {
		case <-l.closed:
			return nil, net.ErrClosed
		default:
		}
		ok, held, limit, changed := l.h.room()
		if ok {
			l.roomy()
			c, err := l.Listener.Accept()
			if err == nil {
				l.h.opened()
				return &conn{Conn: c, h: l.h}, nil
			}
			what, files := shortage(err, l.o.Who)
			if what == "" {
				return nil, err
			}
			if files {
				l.h.full()
			}
			l.short1(what, err)
			changed = nil // another process's files, or memory: try again after a delay
		} else {
			l.short1(l.o.Who+" has "+strconv.Itoa(held)+" files open and its limit allows "+strconv.Itoa(limit)+
				" (ulimit -n; LimitNOFILE= of its systemd unit), of which it keeps the last "+strconv.Itoa(Reserve(limit))+
				" for its own files", nil)
		}
		delay = min(max(2*delay, First), MaxDelay)
		start := time.Now()
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
			delay = 0
		case <-l.closed:
			t.Stop()
		}
		l.wait(time.Since(start))
	}
}

// short1 notes a shortage, described by what (and err), and logs it if it
// begins one.
func (l *listener) short1(what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		return
	default:
	}
	if l.short {
		return
	}
	l.short, l.began, l.last, l.waited = true, time.Now(), time.Now(), 0
	attrs := []any{"listener", l.o.Name}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	l.o.Log.Error(what+": new connections to the "+l.o.Name+" listener wait until some close; "+
		"the connections it has are served", attrs...)
}

// wait counts a wait of d.
func (l *listener) wait(d time.Duration) {
	if l.o.Waited != nil {
		l.o.Waited(d)
	}
	l.mu.Lock()
	l.last = time.Now()
	l.waited += d
	l.mu.Unlock()
}

// roomy notes that the listener has room to accept: during a shortage, the
// shortage is over once it has not waited for quiet.
func (l *listener) roomy() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.short && l.check == nil {
		l.check = time.AfterFunc(l.quiet, l.over)
	}
}

// over ends the shortage if the listener has not waited for quiet, and
// looks again when that will be so otherwise.
func (l *listener) over() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.short {
		return // closed
	}
	if wait := l.quiet - time.Since(l.last); wait > 0 {
		l.check.Reset(wait)
		return
	}
	l.short, l.check = false, nil
	l.o.Log.Info("accepting connections again: none has waited for "+l.quiet.String(), "listener", l.o.Name,
		"short_for", l.last.Sub(l.began).Round(time.Millisecond), "waited", l.waited.Round(time.Millisecond))
}

// Close closes the listener, ending a wait of Accept. A shortage not yet
// over is not said to be.
func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.mu.Lock()
		if l.check != nil {
			l.check.Stop()
		}
		l.short = false
		l.mu.Unlock()
	})
	return l.Listener.Close()
}

// conn is an accepted connection, counted in its Headroom until it is
// closed.
type conn struct {
	net.Conn
	h    *Headroom
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(c.h.closed)
	return c.Conn.Close()
}
