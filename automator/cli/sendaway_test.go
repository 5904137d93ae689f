package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/lastread"
)

// TestAReplicaCutOffFromItsDatabaseClosesItsConnections: once calls have
// found the database out of reach for cutOffFor, and it cannot be reached
// on a connection of its own either, the replica closes its gRPC
// connections, so that their proxies and callers dial again, through the
// load balancer to another replica; again every cutOffFor while it lasts,
// a warning the first time. Not before cutOffFor, not with no outage, and
// not while the database can be reached (busy, its pool's connections
// waiting on a lock: every replica then cut polls whose claims were
// waiting to commit, a review), which is not tried again for cutOffFor.
func TestAReplicaCutOffFromItsDatabaseClosesItsConnections(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := lastread.Wrap(raw, nil)
	defer lis.Close()
	// connect opens a connection the replica holds, and returns the
	// client's end.
	connect := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := lis.Accept(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF || errors.Is(err, net.ErrClosed) || (err != nil && strings.Contains(err.Error(), "reset"))
	}
	var since time.Time
	var reachErr error
	reaches := 0
	var log bytes.Buffer
	sa := &sendAway{
		since:    func() time.Time { return since },
		reach:    func(context.Context) error { reaches++; return reachErr },
		closeAll: lis.CloseAll,
		log:      slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	ctx := t.Context()
	t0 := time.Now()
	c1 := connect()
	if n := sa.step(ctx, t0); n != 0 {
		t.Errorf("no outage: closed %d connections", n)
	}
	since, reachErr = t0, errors.New("no answer")
	if n := sa.step(ctx, t0.Add(cutOffFor-time.Millisecond)); n != 0 {
		t.Errorf("out of reach for less than %v: closed %d connections", cutOffFor, n)
	}
	reachErr = nil
	if n := sa.step(ctx, t0.Add(cutOffFor)); n != 0 || closed(c1) {
		t.Errorf("the calls' outage %v old, but the database reached: closed %d connections", cutOffFor, n)
	}
	reachErr = errors.New("no answer")
	if n := sa.step(ctx, t0.Add(2*cutOffFor-time.Millisecond)); n != 0 || reaches != 1 {
		t.Errorf("less than %v after the database was reached: closed %d connections, %d tries to reach it; want 0 and 1", cutOffFor, n, reaches)
	}
	if n := sa.step(ctx, t0.Add(2*cutOffFor)); n != 1 || !closed(c1) {
		t.Errorf("out of reach for %v, and %v after it was last reached: closed %d connections (the client's closed: %v); want its one", 2*cutOffFor, cutOffFor, n, closed(c1))
	}
	c2 := connect()
	if n := sa.step(ctx, t0.Add(3*cutOffFor-time.Millisecond)); n != 0 || closed(c2) {
		t.Errorf("less than %v after the last close: closed %d connections", cutOffFor, n)
	}
	if n := sa.step(ctx, t0.Add(3*cutOffFor)); n != 1 || !closed(c2) {
		t.Errorf("%v after the last close, still out of reach: closed %d connections; want the new one", cutOffFor, n)
	}
	if got := strings.Count(log.String(), "level=WARN"); got != 1 || !strings.Contains(log.String(), "closed this replica's gRPC connections so that their proxies and callers dial again") {
		t.Errorf("%d warnings; want one, the first time:\n%s", got, log.String())
	}
	// A new outage warns again.
	since = t0.Add(time.Hour)
	connect()
	if n := sa.step(ctx, since.Add(cutOffFor)); n != 1 || strings.Count(log.String(), "level=WARN") != 2 {
		t.Errorf("a second outage: closed %d, log:\n%s", n, log.String())
	}
}

// TestACutOffReplicaTurnsHTTPKeepAlivesOff: HTTP/JSON callers kept alive
// on a cut-off replica (a balancer passing connections through) would
// retry there, each call answered 503: from its first close of the gRPC
// connections until calls find the database again, its HTTP server closes
// its idle connections and each answer closes its own.
func TestACutOffReplicaTurnsHTTPKeepAlivesOff(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go hs.Serve(lis)
	defer hs.Close()
	// get makes a call on c and tells whether the server keeps c open.
	get := func(c net.Conn, r *bufio.Reader) (keptAlive bool) {
		t.Helper()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: replica\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return !resp.Close
	}
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	var since time.Time
	sa := &sendAway{
		since:      func() time.Time { return since },
		reach:      func(context.Context) error { return errors.New("no answer") },
		closeAll:   func() int { return 0 },
		keepAlives: hs.SetKeepAlivesEnabled,
		log:        slog.New(slog.DiscardHandler),
	}
	ctx := t.Context()
	idle, idleR := dial()
	if !get(idle, idleR) {
		t.Fatal("keep-alives off before any outage")
	}
	t0 := time.Now()
	since = t0
	sa.step(ctx, t0.Add(cutOffFor))
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idleR.ReadByte(); err != io.EOF {
		t.Errorf("the idle kept-alive connection, once cut off: read %v; want it closed (EOF)", err)
	}
	c, r := dial()
	if get(c, r) {
		t.Error("a call during the outage kept its connection open; want it closed after the answer")
	}
	since = time.Time{}
	sa.step(ctx, t0.Add(2*cutOffFor))
	c, r = dial()
	if !get(c, r) {
		t.Error("a call once the database is back closed its connection; want keep-alives on again")
	}
}
