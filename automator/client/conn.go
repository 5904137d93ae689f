package client

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// keepaliveTime and keepaliveTimeout are the client's keepalive: a
// connection with a call on it that has heard nothing for keepaliveTime is
// pinged, and given up when the ping's answer has not come keepaliveTimeout
// later. A connection that dies silently during a long wait is so noticed
// within half a minute, and the wait resumes on a new one.
const (
	keepaliveTime    = 20 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// trouble is why the last connection to one address did not reach an
// automator that answers: it could not be made (err is the dial's error),
// or it was made and given up because nothing came over it in time (hung:
// the automator's process stopped or frozen, its packets dropped once the
// connection was made).
type trouble struct {
	err  error
	hung bool
}

// watchedConn is a connection to an automator that notes on its
// address's trouble the first data it hears (the trouble is then past),
// and, when gRPC gives it up (closes it) before the automator ever sent
// anything, or a keepalive's time after it last did, that it was given up
// for silence. gRPC closes a connection itself for other reasons too (a
// GOAWAY drained, an idle channel, a certificate that does not verify),
// but not one silent for that long: a GOAWAY was heard just before, an
// idle connection hears the automator's own pings, a certificate comes
// from the automator.
type watchedConn struct {
	net.Conn
	troubles *atomic.Pointer[trouble]
	opened   time.Time

	mu sync.Mutex
	// heard is when a read last returned data; zero until one does.
	heard time.Time
	// ended is set when a read failed before the connection was closed
	// here: the automator, or something on the way, ended it (a reset,
	// EOF), which is no silence.
	ended  bool
	closed bool
}

func watch(conn net.Conn, troubles *atomic.Pointer[trouble]) *watchedConn {
	return &watchedConn{Conn: conn, troubles: troubles, opened: time.Now()}
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n == 0 && err == nil {
		return n, err
	}
	c.mu.Lock()
	first := false
	if n > 0 {
		first = c.heard.IsZero()
		c.heard = time.Now()
	}
	// A read cut short by a deadline or by this side's Close is no end
	// by the other side.
	if err != nil && !c.closed && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
		c.ended = true
	}
	c.mu.Unlock()
	if first {
		c.troubles.Store(nil) // an automator answered on this address
	}
	return n, err
}

// Close notes the trouble of a connection given up for silence, before
// gRPC fails the calls on it: a call that fails for it finds the trouble
// noted.
func (c *watchedConn) Close() error {
	c.mu.Lock()
	if !c.closed && !c.ended {
		var why error
		switch {
		case c.heard.IsZero():
			why = fmt.Errorf("it accepted the connection, then sent nothing for %v", since(c.opened))
		case time.Since(c.heard) >= keepaliveTime:
			why = fmt.Errorf("nothing came over its connection for %v", since(c.heard))
		}
		if why != nil {
			c.troubles.Store(&trouble{err: why, hung: true})
		}
	}
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}

// since is the time since t, to the tenth of a second (for messages).
func since(t time.Time) time.Duration {
	return time.Since(t).Round(100 * time.Millisecond)
}
