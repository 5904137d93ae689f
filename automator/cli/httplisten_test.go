//go:build linux

package cli

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
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
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
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

// TestSlowRequestBodyIsCutOff: a client that sends its request body a
// byte at a time (slow-loris) is disconnected once the read timeout
// passes, whatever the path: the HTTP server would otherwise wait for the
// body for ever, even to refuse it. An answer that takes longer than the
// read timeout (an execute waiting for its unit's deadline) is not cut
// off: the timeout bounds the reading of the request only.
func TestSlowRequestBodyIsCutOff(t *testing.T) {
	saved := httpReadTimeout
	httpReadTimeout = 300 * time.Millisecond
	t.Cleanup(func() { httpReadTimeout = saved })
	s := serveInProcess(t)
	s.account(t, "acme")

	for _, path := range []string{"/healthz", "/dashboard/login", "/v1/accounts/acme/submit"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.http, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		// Not a timing assertion: only how long the test waits before it
		// says the connection was held.
		if err := conn.SetReadDeadline(time.Now().Add(waittest.Bound)); err != nil {
			t.Fatal(err)
		}
		// The automator answers (an error) or hangs up; either ends the read.
		_, err = io.Copy(io.Discard, conn)
		conn.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("POST %s with a body that never comes: the connection is still open after %v", path, waittest.Bound)
		}
	}

	// An execute that waits past the read timeout for its unit's deadline
	// (no proxy polls) gets its answer: 504, the unit timed out.
	key, err := os.ReadFile(filepath.Join(s.dir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(waittest.Context(t, "the execute to answer"), "POST", s.http+"/v1/accounts/acme/execute",
		strings.NewReader(`{"command": {"script": "x.sh"}, "timeout": "1s"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("execute of a unit that times out after 1 s: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "STATE_TIMED_OUT") {
		t.Fatalf("execute of a unit that times out after 1 s: HTTP %d %s; want 504 and the unit timed out", resp.StatusCode, body)
	}
}

// TestRequestBodyCutOffSaysItDidNotArriveInTime: an API call whose body
// stops coming is answered, once the read timeout passes, 400 with a
// message that says the body did not arrive in time, not the socket's
// "read tcp ADDR->ADDR: i/o timeout", which names neither the body nor
// what ran out.
func TestRequestBodyCutOffSaysItDidNotArriveInTime(t *testing.T) {
	saved := httpReadTimeout
	httpReadTimeout = 300 * time.Millisecond
	t.Cleanup(func() { httpReadTimeout = saved })
	s := serveInProcess(t)
	s.account(t, "acme")
	key, err := os.ReadFile(filepath.Join(s.dir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/accounts/acme/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+
		strings.TrimSpace(string(key))+"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"com\r\n"); err != nil {
		t.Fatal(err)
	}
	// Not a timing assertion: only how long the test waits for the answer.
	if err := conn.SetReadDeadline(time.Now().Add(waittest.Bound)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to a body that stops coming: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	const want = "the request body did not arrive whole within the time the automator gives a request to arrive"
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), want) || strings.Contains(string(body), "i/o timeout") {
		t.Fatalf("a body that stops coming: HTTP %d %s; want 400 saying %q", resp.StatusCode, body, want)
	}
}

// TestHTTPConnectionsPastTheCapWaitForOneToClose: the HTTP listener holds
// at most http_max_connections open; a connection past them is not
// served (it waits in the kernel's queue, taking none of the process's
// file descriptors, which gRPC's proxy connections need) until one of
// them closes, and is then served.
func TestHTTPConnectionsPastTheCapWaitForOneToClose(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPMaxConnections = 2
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	s := serveDirInProcess(t, dir)
	addr := strings.TrimPrefix(s.http, "http://")
	// healthz asks /healthz on conn and reads the answer.
	healthz := func(conn net.Conn) error {
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	var held []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		// Answered: the automator has the connection, kept alive.
		if err := healthz(conn); err != nil {
			t.Fatalf("/healthz on a connection under the cap: %v", err)
		}
		held = append(held, conn)
	}
	third, err := net.Dial("tcp", addr) // the kernel's queue takes it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { third.Close() })
	answered := make(chan error, 1)
	go func() { answered <- healthz(third) }()
	// Not a timing assertion: how long the test looks for an answer that
	// must not come while both connections are held.
	select {
	case err := <-answered:
		t.Fatalf("a connection past the cap of 2 was served (%v) while 2 were open", err)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	if err := waittest.Recv(t, answered, "the connection past the cap to be served once one closed"); err != nil {
		t.Fatalf("/healthz on the connection past the cap, once one closed: %v", err)
	}
}
