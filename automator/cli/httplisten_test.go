//go:build linux

package cli

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/waittest"
)

// TestIdleHTTPConnectionIsClosed: a client that made a request on the HTTP
// listener and keeps its connection open without another one is
// disconnected once the idle timeout passes, so idle keep-alive
// connections (anyone may open them: /healthz needs no key) cannot pile up
// until the process runs out of file descriptors.
func TestIdleHTTPConnectionIsClosed(t *testing.T) {
	saved := httpIdleTimeout
	httpIdleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { httpIdleTimeout = saved })
	s := serveInProcess(t)

	conn, err := net.Dial("tcp", strings.TrimPrefix(s.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: automator\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Not a timing assertion: only how long the test waits before it
	// says the connection was not closed.
	if err := conn.SetReadDeadline(time.Now().Add(waittest.Bound)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the /healthz answer: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("/healthz: HTTP %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	// The connection is now idle: the automator closes it.
	if n, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("reading the idle connection: %v (byte %q); want EOF: the automator closes it", err, n)
	}
}
