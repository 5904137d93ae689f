// Package connlimit caps the connections an HTTP server holds open, as
// golang.org/x/net/netutil.LimitListener does, without letting connections
// that sit idle between requests keep the others out.
//
// Anyone who can reach an HTTP listener can open connections, and a
// client's keep-alive pool leaves them open: with LimitListener, the cap's
// worth of kept-alive connections (a client that opened them and went
// quiet, for the server's whole IdleTimeout) made every new connection
// wait, /healthz's included. Here a connection past the cap is accepted,
// and the connection idle the longest is closed to make room for it: an
// idle connection holds no request, and a client whose idle connection
// was closed opens another. Only when every connection held is busy with
// a request does the new one wait for one to close, holding one file
// descriptor past the cap meanwhile (the next wait in the kernel's
// queue, holding none).
package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"sync"
)

// Options configure New.
type Options struct {
	// Waiting, if set, is told when a new connection begins to wait for
	// one to close (every connection held being in a request).
	Waiting func()
	// Evicted, if set, is told of each idle connection closed to make
	// room.
	Evicted func()
}

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
}

// New caps l at n connections (n >= 1).
func New(l net.Listener, n int, o Options) *Listener {
	return &Listener{Listener: l, o: o, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for the next connection and returns it once it has a
// place: at once under the cap; at the cap, once the connection idle the
// longest has been closed for it, or, with none idle, once one closes.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
		return l.wrap(c), nil
	default:
	}
	if l.evictIdle() {
		if l.o.Evicted != nil {
			l.o.Evicted()
		}
	} else if l.o.Waiting != nil {
		l.o.Waiting()
	}
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		c.Close()
		return nil, net.ErrClosed
	}
	return l.wrap(c), nil
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
			c.elem = l.idle.PushBack(c)
		}
		return
	}
	l.forget(c)
}

// evictIdle closes the connection idle the longest, which gives its place
// back at once; false if none is idle.
func (l *Listener) evictIdle() bool {
	l.mu.Lock()
	front := l.idle.Front()
	var c *conn
	if front != nil {
		c = front.Value.(*conn)
		l.forget(c)
	}
	l.mu.Unlock()
	if c == nil {
		return false
	}
	// The server's read of the next request fails, and it lets the
	// connection go. Its place is back once Close returns.
	c.Close()
	return true
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
	// elem is c's place in l.idle while it is idle; gone, once it has
	// closed (both under l.mu).
	elem *list.Element
	gone bool
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
