// Package lastread tells how long ago each connection of a listener last
// delivered anything. A proxy pings its automator after 10 s without
// traffic, so a connection silent for much longer is most likely dead
// (its host lost power, a partition cut it) even though nothing closed
// it: the automator prefers to hand work to polls on connections it has
// heard from.
package lastread

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listener is a net.Listener whose connections record when a read last
// returned data.
type Listener struct {
	net.Listener
	now   func() time.Time
	epoch time.Time // reads are stamped as the time since (monotonic)

	mu    sync.Mutex
	conns map[string]*conn // by remote address
}

// Wrap watches the connections l accepts, telling time by now (time.Now
// when nil).
func Wrap(l net.Listener, now func() time.Time) *Listener {
	if now == nil {
		now = time.Now
	}
	return &Listener{Listener: l, now: now, epoch: now(), conns: make(map[string]*conn)}
}

// Accept accepts a connection and watches its reads.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	w := &conn{Conn: c, l: l, key: c.RemoteAddr().String()}
	w.last.Store(l.since())
	l.mu.Lock()
	l.conns[w.key] = w
	l.mu.Unlock()
	return w, nil
}

// Silence returns, for the connection from peer, a function telling how long
// ago it last delivered data; nil when no open connection comes from peer.
func (l *Listener) Silence(peer net.Addr) func() time.Duration {
	if peer == nil {
		return nil
	}
	l.mu.Lock()
	c := l.conns[peer.String()]
	l.mu.Unlock()
	if c == nil {
		return nil
	}
	return func() time.Duration {
		return max(0, time.Duration(l.since()-c.last.Load()))
	}
}

// CloseAll closes every connection the listener accepted that is still
// open, and returns how many: their clients dial again (through a load
// balancer, possibly to another server).
func (l *Listener) CloseAll() int {
	l.mu.Lock()
	open := make([]*conn, 0, len(l.conns))
	for _, c := range l.conns {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
	return len(open)
}

func (l *Listener) since() int64 { return int64(l.now().Sub(l.epoch)) }

type conn struct {
	net.Conn
	l    *Listener
	key  string
	last atomic.Int64 // when a read last returned data (Listener.since)

	closeOnce sync.Once
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.last.Store(c.l.since())
	}
	return n, err
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.key] == c {
			delete(c.l.conns, c.key)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
