package lastread_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/lastread"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestSilenceIsTheTimeSinceTheConnectionLastDeliveredData: a connection's
// silence grows while nothing arrives, starts again at 0 when data is
// read, and the connection is forgotten once closed.
func TestSilenceIsTheTimeSinceTheConnectionLastDeliveredData(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := lastread.Wrap(raw, clk.Now)
	defer l.Close()

	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	silence := l.Silence(client.LocalAddr())
	if silence == nil {
		t.Fatal("no connection known from the client's address")
	}
	if other := l.Silence(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}); other != nil {
		t.Fatal("a connection known from an address that never connected")
	}
	if got := silence(); got != 0 {
		t.Fatalf("silence %v just after accepting, want 0", got)
	}

	clk.advance(20 * time.Second)
	if got := silence(); got != 20*time.Second {
		t.Fatalf("silence %v after 20 s without data, want 20s", got)
	}

	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if got := silence(); got != 0 {
		t.Fatalf("silence %v just after a read, want 0", got)
	}
	clk.advance(3 * time.Second)
	if got := silence(); got != 3*time.Second {
		t.Fatalf("silence %v 3 s after a read, want 3s", got)
	}

	server.Close()
	if l.Silence(client.LocalAddr()) != nil {
		t.Fatal("a closed connection is still known")
	}
}

// TestCloseAllClosesEveryOpenConnection: CloseAll closes the connections
// accepted and still open, and counts them; one closed before is not
// counted.
func TestCloseAllClosesEveryOpenConnection(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := lastread.Wrap(raw, nil)
	defer l.Close()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if len(clients) == 3 {
			s.Close()
		}
	}
	if n := l.CloseAll(); n != 2 {
		t.Errorf("CloseAll closed %d; want the 2 still open", n)
	}
	for i, c := range clients[:2] {
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("client %d reads %v; want EOF, its connection closed", i, err)
		}
	}
	if n := l.CloseAll(); n != 0 {
		t.Errorf("CloseAll again closed %d; want 0", n)
	}
}
