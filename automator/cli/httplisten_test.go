//go:build linux

package cli

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/metrics"
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
	saved, savedBody := httpReadTimeout, httpBodyTimeout
	httpReadTimeout, httpBodyTimeout = 300*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() { httpReadTimeout, httpBodyTimeout = saved, savedBody })
	conn := keyedSubmit(t, "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"com\r\n")
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

// keyedSubmit starts an automator with account acme and sends, on a
// connection of its own, a submit with the data directory's API key: its
// headers, then rest (the last headers, their blank line and a body's
// start). The connection closes with the test.
func keyedSubmit(t *testing.T, rest string) net.Conn {
	t.Helper()
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
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "POST /v1/accounts/acme/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+
		strings.TrimSpace(string(key))+"\r\nContent-Type: application/json\r\n"+rest); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestAnAcceptedKeysBodyHasLongerToArrive: the body of an API call whose
// key is accepted may arrive after the read timeout of requests without
// one (which anyone may send, and which it keeps short), within its own.
func TestAnAcceptedKeysBodyHasLongerToArrive(t *testing.T) {
	saved, savedBody := httpReadTimeout, httpBodyTimeout
	httpReadTimeout, httpBodyTimeout = 300*time.Millisecond, time.Minute
	t.Cleanup(func() { httpReadTimeout, httpBodyTimeout = saved, savedBody })
	body := `{"command": {"script": "x.sh"}}`
	conn := keyedSubmit(t, "Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body[:5])
	// The slow client under test: the rest comes after the short timeout.
	time.Sleep(3 * httpReadTimeout)
	if _, err := io.WriteString(conn, body[5:]); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(waittest.Bound)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to a body that came slowly: %v", err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), `"work_id"`) {
		t.Fatalf("a submit whose body came after the short read timeout: HTTP %d %s; want it queued", resp.StatusCode, answer)
	}
}

// TestHTTPConnectionsPastTheCapCloseTheOneIdleTheLongest: at
// http_max_connections, a new connection is served, and the connection
// kept alive idle the longest (for 2 s at least) is closed for it (it waited, with
// netutil.LimitListener, for the idle connections' whole idle timeout);
// the metric counts it. What a connection does when every one held is in
// a request (it waits) is internal/connlimit's test.
func TestHTTPConnectionsPastTheCapCloseTheOneIdleTheLongest(t *testing.T) {
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
	// get asks path on conn and returns the answer's body.
	get := func(conn net.Conn, path string) (string, error) {
		conn.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = errors.New(resp.Status)
		}
		return string(body), err
	}
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	var held []net.Conn
	for range 2 {
		conn := dial()
		// Answered: the automator has the connection, kept alive.
		if _, err := get(conn, "/healthz"); err != nil {
			t.Fatalf("/healthz on a connection under the cap: %v", err)
		}
		held = append(held, conn)
	}
	if _, err := get(dial(), "/healthz"); err != nil {
		t.Fatalf("/healthz on a connection past the cap, both held idle: %v; want it served", err)
	}
	// One of the two was closed for it, and the other is served still.
	// (Which one was idle longer is the server's to say: it calls a
	// connection idle after its answer is sent, and on a loaded machine
	// the second's may come first.)
	var closed int
	for _, conn := range held {
		if _, err := get(conn, "/healthz"); err != nil {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("%d of the 2 connections held idle were closed for the one past the cap; want 1", closed)
	}
	// This connection closes another one idle in its turn.
	metrics, err := get(dial(), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if want := `automator_http_connection_cap_total{action="idle_closed"} 2`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// TestAWaitAtTheHTTPCapIsCountedAndLoggedOnceAMinute: every wait counts,
// and the log's warning comes once for a burst of them.
func TestAWaitAtTheHTTPCapIsCountedAndLoggedOnceAMinute(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	m := metrics.New(metrics.Options{})
	o := httpCapOptions(2, m, newLogger(&log, "json"))
	for range 3 {
		o.Waiting()
	}
	o.Evicted()
	if n := strings.Count(log.String(), "the HTTP listener holds http_max_connections (2) connections, each in a request"); n != 1 {
		t.Errorf("%d warnings for 3 waits in a row, want 1:\n%s", n, log.String())
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`automator_http_connection_cap_total{action="waited"} 3`, `automator_http_connection_cap_total{action="idle_closed"} 1`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestRequestHeadersPastTheirBoundAreRefused: headers past 64 KiB get 431
// without the automator holding more; headers of a few KiB, as a
// caller's with a cookie, are served.
func TestRequestHeadersPastTheirBoundAreRefused(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	for size, want := range map[int]int{4 << 10: http.StatusOK, 100 << 10: http.StatusRequestHeaderFieldsTooLarge} {
		req, err := http.NewRequest("GET", s.http+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Filler", strings.Repeat("a", size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("headers of %d bytes: %v", size, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("headers of %d bytes: %s, want %d", size, resp.Status, want)
		}
	}
}

// TestServeWarnsOfAPlainHTTPListenerOffLoopback: the HTTP listener serves
// plain HTTP, and its API and dashboard sign-in take API keys; serve warns
// of one off loopback (a review: 0.0.0.0 was served without a word), and
// of none on it. The address is judged as gRPC's plaintext one is
// (config.RequireLoopback); a test binds no address off loopback.
func TestServeWarnsOfAPlainHTTPListenerOffLoopback(t *testing.T) {
	t.Parallel()
	for addr, warns := range map[string]bool{
		"127.0.0.1:8080": false, "localhost:8080": false, "[::1]:8080": false, "127.0.0.2:0": false,
		"0.0.0.0:8080": true, ":8080": true, "[::]:8080": true, "10.1.2.3:8080": true, "automator.example:8080": true,
	} {
		w := plainHTTPWarning(addr)
		if got := w != ""; got != warns || (warns && !strings.Contains(w, "API keys, which cross the network in clear")) {
			t.Errorf("plainHTTPWarning(%q) = %q; want a warning: %v", addr, w, warns)
		}
	}
}
