package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// smallSendBuffers gives every connection it accepts a small, fixed send
// buffer (no autotuning), so that a client that stops reading blocks the
// server's writes after kilobytes, not megabytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// TestStalledEventStreamIsDropped: a client that opens an event stream and
// then stops reading (a raw connection with a tiny receive buffer) is
// dropped once a write to it has been blocked for WriteTimeout, and the
// stream's handler ends, instead of holding its goroutine until the
// client goes away.
func TestStalledEventStreamIsDropped(t *testing.T) {
	e := newEnv(t)
	// A unit whose output (shown to admin) is far larger than both
	// sockets' buffers: the stream's first update cannot be written whole.
	now := e.clock.Now()
	e.enqueue("w_big", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "big.sh"})
	e.run("acme", "a-1", now.Add(-59*time.Second), now.Add(-58*time.Second),
		&automatorv1.Result{Stdout: bytes.Repeat([]byte("0123456789abcdef\n"), 1<<16)})
	d, base := e.start(replica{
		opts:   func(o *dashboard.Options) { o.WriteTimeout = 200 * time.Millisecond },
		listen: func(l net.Listener) net.Listener { return smallSendBuffers{l} },
	})
	c := client(t)
	e.signIn(c, base, "admin")
	u, _ := url.Parse(base + "/dashboard/")
	var cookie string
	for _, ck := range c.Jar.Cookies(u) {
		cookie = ck.Name + "=" + ck.Value
	}
	if cookie == "" {
		t.Fatal("no session cookie after signing in")
	}

	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(1 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET /dashboard/work/w_big HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nCookie: %s\r\n\r\n", u.Host, cookie); err != nil {
		t.Fatal(err)
	}
	// Read the response's head only: the stream began. Then read no more.
	if err := conn.SetReadDeadline(time.Now().Add(waittest.Bound)); err != nil { // a head that never comes fails, not hangs
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 1<<10)
	status, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("status line %q, %v; want 200", status, err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the response's head: %v", err)
		}
		if line == "\r\n" {
			break
		}
		if h, v, _ := strings.Cut(line, ":"); http.CanonicalHeaderKey(h) == "Content-Type" && strings.TrimSpace(v) != "text/event-stream" {
			t.Fatalf("Content-Type %q, want text/event-stream", v)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := d.WaitStreamsEnded(ctx, 1); err != nil {
		t.Fatalf("the stream of a client that stopped reading did not end: %v", err)
	}
}
