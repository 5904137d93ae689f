package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/waittest"
)

// server serves h on loopback, capped at n connections, and returns its
// address and a channel told each time the listener hears a connection
// went idle.
func server(t *testing.T, n int, h http.Handler, o Options) (string, <-chan struct{}) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(raw, n, o)
	idle := make(chan struct{}, 64)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute, ConnState: func(c net.Conn, s http.ConnState) {
		l.ConnState(c, s)
		if s == http.StateIdle {
			idle <- struct{}{}
		}
	}}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return raw.Addr().String(), idle
}

// client is one connection to the server, with its reader.
type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A test that fails fails, rather than hang for an answer.
	c.SetDeadline(time.Now().Add(time.Minute))
	return &client{c, bufio.NewReader(c)}
}

// get sends GET path and reads the answer's status.
func (c *client) get(path string) (int, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// getLater sends GET path on c in the background; get's error comes on
// the channel returned.
func (c *client) getLater(path string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := c.get(path)
		ch <- err
	}()
	return ch
}

// closedByServer reports whether the server closed c: a read ends (EOF or
// a reset) rather than waiting.
func (c *client) closedByServer() bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

var ok = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// busyHandler answers /busy once release is closed (or its client went
// away), after telling busy that a request is in it (n at once without
// blocking), and any other path at once.
func busyHandler(n int) (h http.Handler, busy <-chan struct{}, release chan struct{}) {
	in := make(chan struct{}, n)
	release = make(chan struct{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			in <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done(): // its client went away
			}
		}
	}), in, release
}

// TestAConnectionPastTheCapClosesTheOneIdleTheLongest: with the cap's
// worth of connections kept alive between requests, a new connection is
// served, and the one idle the longest is closed for it; the other is
// still served.
func TestAConnectionPastTheCapClosesTheOneIdleTheLongest(t *testing.T) {
	t.Parallel()
	var evicted atomic.Int32
	addr, idle := server(t, 2, ok, Options{MinIdle: time.Nanosecond, Evicted: func() { evicted.Add(1) }, Waiting: func() { t.Error("a new connection waited while one was idle") }})
	first, second := dial(t, addr), dial(t, addr)
	for _, c := range []*client{first, second} {
		if code, err := c.get("/"); err != nil || code != 200 {
			t.Fatalf("a connection under the cap: %d %v", code, err)
		}
		// Idle on the server's side too (it says so after the answer
		// has left), before the next is used.
		waittest.Recv(t, idle, "the connection to go idle")
	}
	third := dial(t, addr)
	if code, err := third.get("/"); err != nil || code != 200 {
		t.Fatalf("a connection past the cap, two idle: %d %v; want it served", code, err)
	}
	if !first.closedByServer() {
		t.Error("the connection idle the longest was not closed")
	}
	if code, err := second.get("/"); err != nil || code != 200 {
		t.Errorf("the other idle connection: %d %v; want it served still", code, err)
	}
	if n := evicted.Load(); n != 1 {
		t.Errorf("Evicted told %d times, want 1", n)
	}
}

// TestAConnectionPastTheCapWaitsWhileEveryOneIsBusy: with the cap's worth
// of connections each in a request, a new one waits, and is served once
// one of them closes.
func TestAConnectionPastTheCapWaitsWhileEveryOneIsBusy(t *testing.T) {
	t.Parallel()
	h, busy, release := busyHandler(2)
	waiting := make(chan struct{}, 1)
	addr, _ := server(t, 2, h, Options{
		Waiting: func() { waiting <- struct{}{} },
		Evicted: func() { t.Error("a busy connection was closed") },
	})
	var held []*client
	for range 2 {
		c := dial(t, addr)
		if _, err := io.WriteString(c, "GET /busy HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		waittest.Recv(t, busy, "a connection under the cap to be in its request")
		held = append(held, c)
	}
	third := dial(t, addr)
	answered := third.getLater("/")
	waittest.Recv(t, waiting, "the connection past the cap to wait")
	select {
	case err := <-answered:
		t.Fatalf("a connection past the cap was served (%v) while every one held was busy", err)
	default:
	}
	held[0].Close()
	if err := waittest.Recv(t, answered, "the connection past the cap to be served once one closed"); err != nil {
		t.Fatalf("the connection past the cap: %v", err)
	}
	close(release)
}

// TestAConnectionJustAnsweredIsNotClosed: a connection idle for less than
// MinIdle may carry its client's next request already, and is not closed
// for a new one, which waits (here until one of them closes).
func TestAConnectionJustAnsweredIsNotClosed(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{}, 1)
	addr, _ := server(t, 2, ok, Options{MinIdle: time.Hour,
		Waiting: func() { waiting <- struct{}{} },
		Evicted: func() { t.Error("a connection idle for less than MinIdle was closed") },
	})
	first, second := dial(t, addr), dial(t, addr)
	for _, c := range []*client{first, second} {
		if code, err := c.get("/"); err != nil || code != 200 {
			t.Fatalf("a connection under the cap: %d %v", code, err)
		}
	}
	third := dial(t, addr)
	answered := third.getLater("/")
	waittest.Recv(t, waiting, "the connection past the cap to wait")
	if code, err := second.get("/"); err != nil || code != 200 {
		t.Errorf("a connection idle for less than MinIdle, used again: %d %v; want it served", code, err)
	}
	first.Close()
	if err := waittest.Recv(t, answered, "the connection past the cap to be served once one closed"); err != nil {
		t.Fatalf("the connection past the cap: %v", err)
	}
}

// TestAWaitingConnectionTakesTheNextToGoIdle: a connection waiting at the
// cap while every one is in a request gets its place when one of them goes
// idle (its answer sent, its client keeping it), not only when one closes
// (it waited for the idle one's whole idle timeout: review 5).
func TestAWaitingConnectionTakesTheNextToGoIdle(t *testing.T) {
	t.Parallel()
	h, busy, release := busyHandler(1)
	waiting := make(chan struct{}, 1)
	addr, _ := server(t, 1, h, Options{MinIdle: time.Nanosecond, Waiting: func() { waiting <- struct{}{} }})
	first := dial(t, addr)
	answeredFirst := first.getLater("/busy")
	waittest.Recv(t, busy, "the first connection to be in its request")
	second := dial(t, addr)
	answered := second.getLater("/")
	waittest.Recv(t, waiting, "the second connection to wait")
	close(release) // the first is answered, and kept alive: idle
	if err := waittest.Recv(t, answeredFirst, "the first request's answer"); err != nil {
		t.Fatal(err)
	}
	if err := waittest.Recv(t, answered, "the waiting connection to be served once the other went idle"); err != nil {
		t.Fatalf("the waiting connection: %v", err)
	}
}

// TestCloseEndsAnAcceptWaitingForAPlace: a server shut down while a new
// connection waits at the cap stops.
func TestCloseEndsAnAcceptWaitingForAPlace(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	l := New(raw, 1, Options{Waiting: func() { waiting <- struct{}{} }})
	held := dial(t, raw.Addr().String())
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dial(t, raw.Addr().String())
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	waittest.Recv(t, waiting, "the second connection to wait")
	l.Close()
	if err := waittest.Recv(t, accepted, "Accept to return once the listener closed"); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	held.Close()
}
