package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/lastread"
)

// TestAReplicaCutOffFromItsDatabaseClosesItsConnections: once the
// database has been out of reach for cutOffFor (and the store's ping
// fails too), the replica closes its gRPC connections, so that their
// proxies and callers dial again, through the load balancer to another
// replica; again every cutOffFor while it lasts, a warning the first
// time. Not before cutOffFor, not while the ping answers, not with no
// outage.
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
	var pingErr error
	var log bytes.Buffer
	sa := &sendAway{
		since:    func() time.Time { return since },
		ping:     func(context.Context) error { return pingErr },
		closeAll: lis.CloseAll,
		log:      slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	ctx := t.Context()
	t0 := time.Now()
	c1 := connect()
	if n := sa.step(ctx, t0); n != 0 {
		t.Errorf("no outage: closed %d connections", n)
	}
	since, pingErr = t0, errors.New("no answer")
	if n := sa.step(ctx, t0.Add(cutOffFor-time.Millisecond)); n != 0 {
		t.Errorf("out of reach for less than %v: closed %d connections", cutOffFor, n)
	}
	pingErr = nil
	if n := sa.step(ctx, t0.Add(cutOffFor)); n != 0 {
		t.Errorf("the calls' outage %v old, but the ping answers: closed %d connections", cutOffFor, n)
	}
	pingErr = errors.New("no answer")
	if n := sa.step(ctx, t0.Add(cutOffFor)); n != 1 || !closed(c1) {
		t.Errorf("out of reach for %v: closed %d connections (the client's closed: %v); want its one", cutOffFor, n, closed(c1))
	}
	c2 := connect()
	if n := sa.step(ctx, t0.Add(2*cutOffFor-time.Millisecond)); n != 0 || closed(c2) {
		t.Errorf("less than %v after the last close: closed %d connections", cutOffFor, n)
	}
	if n := sa.step(ctx, t0.Add(2*cutOffFor)); n != 1 || !closed(c2) {
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
