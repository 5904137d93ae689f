package pgstore

import (
	"bytes"
	"net"
	"net/url"
	"sync"
	"testing"
)

// relayMode is what a markerRelay does once its marker has passed.
type relayMode int

const (
	// hang: it carries nothing more to PostgreSQL on any connection (the
	// store hangs, as seen from PostgreSQL: its transaction, if any, stays
	// open).
	hang relayMode = iota
	// deafen: PostgreSQL gets the marker's bytes (and runs, and commits,
	// what they ask), but nothing it answers on that connection reaches
	// the store any more; cut then ends the store's side of it, so the
	// store learns of the loss only after its statements committed: an
	// outcome it cannot know.
	deafen
)

// markerRelay carries a store's connections to PostgreSQL until, once
// armed with a marker, one of them sends it; then it acts as its mode
// says, and closes fired, once.
type markerRelay struct {
	dsn   string
	fired chan struct{}
	mode  relayMode

	lis    net.Listener
	once   sync.Once
	mu     sync.Mutex
	marker []byte            // nil until armed
	held   bool              // hang: the marker passed
	deaf   map[net.Conn]bool // deafen: the store's sides of the connections made deaf
	conns  []net.Conn
	closed bool // close ran: a connection accepted meanwhile is closed at once
}

func startMarkerRelay(t *testing.T, dsn string, mode relayMode) *markerRelay {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = lis.Addr().String()
	r := &markerRelay{dsn: u.String(), fired: make(chan struct{}), mode: mode, lis: lis, deaf: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			if r.closed {
				// Accepted just before close: no goroutine of the relay
				// outlives the test.
				r.mu.Unlock()
				c.Close()
				s.Close()
				return
			}
			r.conns = append(r.conns, c, s)
			r.mu.Unlock()
			go r.toStore(c, s)
			go r.toServer(s, c)
		}
	}()
	return r
}

// arm makes the relay act once marker passes (opening the store, with its
// migrations, goes through before).
func (r *markerRelay) arm(marker []byte) {
	r.mu.Lock()
	r.marker = marker
	r.mu.Unlock()
}

// toServer copies the store's bytes to PostgreSQL, watching for the marker
// (in a chunk with the bytes before it kept, so a marker split across
// reads is seen too).
func (r *markerRelay) toServer(dst, src net.Conn) {
	var tail []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		seen := append(tail, buf[:n]...)
		r.mu.Lock()
		if r.marker != nil && bytes.Contains(seen, r.marker) {
			if r.mode == hang {
				r.held = true
			} else {
				r.deaf[src] = true
			}
			r.marker = nil
			r.once.Do(func() { close(r.fired) })
		}
		held := r.held
		r.mu.Unlock()
		if held {
			continue // swallowed: PostgreSQL never hears of it
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
		tail = append(tail[:0], seen[max(0, len(seen)-64):]...)
	}
}

// toStore copies PostgreSQL's answers to the store, but for a deaf
// connection.
func (r *markerRelay) toStore(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			dst.Close()
			return
		}
		r.mu.Lock()
		deaf := r.deaf[dst]
		r.mu.Unlock()
		if deaf {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// cut ends the store's side of the deaf connections.
func (r *markerRelay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.deaf {
		c.Close()
	}
}

func (r *markerRelay) close() {
	r.lis.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, c := range r.conns {
		c.Close()
	}
}
