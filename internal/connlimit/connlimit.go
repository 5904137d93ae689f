// Package connlimit caps the connections an HTTP server holds open, as
// golang.org/x/net/netutil.LimitListener does, without letting connections
// that sit idle between requests keep the others out.
//
// Anyone who can reach an HTTP listener can open connections, and a
// client's keep-alive pool leaves them open: with LimitListener, the cap's
// worth of kept-alive connections (a client that opened them and went
// quiet, for the server's whole IdleTimeout) made every new connection
// wait, /healthz's included. Here a connection past the cap is accepted,
// and the connection idle the longest is closed to make room for it, once
// it has been idle for Options.MinIdle: an idle connection holds no
// request, and a client whose idle connection was closed opens another.
// Until one has, or while every connection held is busy with a request,
// the new one waits (holding one file descriptor past the cap; the next
// wait in the kernel's queue, holding none) until one closes or has been
// idle long enough.
package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"time"
)

// Options configure New.
type Options struct {
	// Waiting, if set, is told when a new connection begins to wait for
	// a place (every connection held being in a request, or idle for
	// less than MinIdle).
	Waiting func()
	// Evicted, if set, is told of each idle connection closed to make
	// room.
	Evicted func()
	// MinIdle is how long a connection must have been idle before it is
	// closed for a new one (DefaultMinIdle if 0). An HTTP/1 server calls a
	// connection idle once its answer is sent, and active only once the
	// next request's headers are whole: a connection just answered may
	// already carry its client's next request, and closing it would fail
	// that request (a POST, which clients do not send again), or answer it
	// to no one once the server has read it. A client that sends its next
	// request after this long risks no more than the server's IdleTimeout
	// makes it risk.
	MinIdle time.Duration
}

// DefaultMinIdle is Options.MinIdle's default.
const DefaultMinIdle = 2 * time.Second

// Listener is a net.Listener holding at most its cap of connections open.
// Its ConnState must be the http.Server's ConnState, for it to know which
// connections are idle.
type Listener struct {
	net.Listener
	o      Options
	slots  chan struct{} // one element for each connection held
	closed chan struct{}
	once   sync.Once

	mu   sync.Mutex
	idle list.List // of *conn, idle the longest first
	// wentIdle is sent to (without blocking) when a connection goes
	// idle: an Accept waiting for a place looks again.
	wentIdle chan struct{}
}

// New caps l at n connections (n >= 1).
func New(l net.Listener, n int, o Options) *Listener {
	if o.MinIdle <= 0 {
		o.MinIdle = DefaultMinIdle
	}
	return &Listener{Listener: l, o: o, slots: make(chan struct{}, n), closed: make(chan struct{}), wentIdle: make(chan struct{}, 1)}
}

// Accept waits for the next connection and returns it once it has a
// place: at once under the cap; at the cap, once the connection idle the
// longest has been idle for MinIdle and is closed for it, or one closes.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	told := false
	for {
		select {
		case l.slots <- struct{}{}:
			return l.wrap(c), nil
		default:
		}
		after, evicted := l.evictIdle()
		if evicted {
			if l.o.Evicted != nil {
				l.o.Evicted()
			}
			continue // its place is back
		}
		if !told && l.o.Waiting != nil {
			l.o.Waiting()
		}
		told = true
		var timer *time.Timer
		var ripe <-chan time.Time
		if after > 0 { // the one idle the longest may be closed then
			timer = time.NewTimer(after)
			ripe = timer.C
		}
		select {
		case l.slots <- struct{}{}:
			stop(timer)
			return l.wrap(c), nil
		case <-l.wentIdle:
		case <-ripe:
		case <-l.closed:
			stop(timer)
			c.Close()
			return nil, net.ErrClosed
		}
		stop(timer)
	}
}

func stop(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

// Close closes the listener; an Accept waiting for a place returns.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// ConnState is the http.Server's ConnState hook: a connection between
// requests is idle, and may be closed for a new one.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		if u, isTLS := nc.(interface{ NetConn() net.Conn }); isTLS {
			c, ok = u.NetConn().(*conn)
		}
	}
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == http.StateIdle {
		if c.elem == nil && !c.gone {
			c.idleSince = time.Now()
			c.elem = l.idle.PushBack(c)
			select {
			case l.wentIdle <- struct{}{}:
			default:
			}
		}
		return
	}
	l.forget(c)
}

// evictIdle closes the connection idle the longest if it has been idle
// for MinIdle, which gives its place back at once. Else it returns how
// long until it has been (0: none is idle).
func (l *Listener) evictIdle() (after time.Duration, evicted bool) {
	l.mu.Lock()
	front := l.idle.Front()
	var c *conn
	if front != nil {
		c = front.Value.(*conn)
		if after = l.o.MinIdle - time.Since(c.idleSince); after > 0 {
			l.mu.Unlock()
			return after, false
		}
		l.forget(c)
	}
	l.mu.Unlock()
	if c == nil {
		return 0, false
	}
	// The server's read of the next request fails, and it lets the
	// connection go. Its place is back once Close returns.
	c.Close()
	return 0, true
}

// forget takes c off the idle list (l.mu held).
func (l *Listener) forget(c *conn) {
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
}

func (l *Listener) wrap(c net.Conn) *conn { return &conn{Conn: c, l: l} }

// conn gives its place back when it is first closed.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
	// elem is c's place in l.idle while it is idle, since idleSince;
	// gone, once it has closed (all under l.mu).
	elem      *list.Element
	idleSince time.Time
	gone      bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.forget(c)
		c.gone = true
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}
