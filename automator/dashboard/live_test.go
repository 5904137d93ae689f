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
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/store"
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

// TestLivePagesOfOneKeyAreBounded: one API key holds at most
// MaxLiveStreamsPerKey live pages open on a replica (each reads the store
// at every refresh). The next is told "paused", why, and ends, so the page
// stops rather than reconnecting; another key is not held back, and once
// one of the first key's pages closes, its next page is live again.
func TestLivePagesOfOneKeyAreBounded(t *testing.T) {
	e := newEnv(t)
	d, base := e.start(replica{opts: func(o *dashboard.Options) { o.MaxLiveStreamsPerKey = 2 }})
	viewer, admin := client(t), client(t)
	e.signIn(viewer, base, "viewer")
	e.signIn(admin, base, "admin")
	first := func(c *http.Client, ctx context.Context) (event, <-chan event) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/dashboard/work", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		events := make(chan event)
		go readEvents(resp.Body, events)
		t.Cleanup(func() {
			resp.Body.Close()
			for range events { // until readEvents ends
			}
		})
		for ev := range events {
			if ev.name != "keepalive" {
				return ev, events
			}
		}
		t.Fatal("the stream ended without an event")
		return event{}, nil
	}
	closeFirst, cancel := context.WithCancel(t.Context())
	for i, ctx := range []context.Context{closeFirst, t.Context()} {
		if ev, _ := first(viewer, ctx); ev.name != "update" {
			t.Fatalf("the viewer's live page %d: first event %q, want update", i+1, ev.name)
		}
	}
	ev, events := first(viewer, t.Context())
	want := "not live: this API key has 2 live pages open on this automator, the most it may; close some, then reload this one"
	if ev.name != "paused" || ev.data != want {
		t.Fatalf("the viewer's third live page: %q %q; want paused, %q", ev.name, ev.data, want)
	}
	for ev := range events {
		if ev.name != "keepalive" {
			t.Errorf("after paused, the stream went on with %q", ev.name)
		}
	}
	if ev, _ := first(admin, t.Context()); ev.name != "update" {
		t.Errorf("another key's live page: first event %q, want update", ev.name)
	}
	cancel()
	// The paused stream and the closed one.
	if err := d.WaitStreamsEnded(waittest.Context(t, "two of the viewer's streams to end"), 2); err != nil {
		t.Fatal(err)
	}
	if ev, _ := first(viewer, t.Context()); ev.name != "update" {
		t.Errorf("the viewer's live page once one of its two closed: first event %q, want update", ev.name)
	}
}

// countingReads counts the reads of a unit whole (WorkGet) and of
// listings (WorkList).
type countingReads struct {
	store.Store
	gets, lists atomic.Int32
}

func (c *countingReads) WorkGet(ctx context.Context, id string) (store.Work, error) {
	c.gets.Add(1)
	return c.Store.WorkGet(ctx, id)
}

func (c *countingReads) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	c.lists.Add(1)
	return c.Store.WorkList(ctx, p)
}

// TestTheLivePageOfAnEndedUnitIsNotReadWholeAgain: an ended unit's page,
// once sent, is not read whole (its sealed output, up to megabytes, opened
// and rendered) at every refresh: a read of its row without them says it
// stands. When it no longer does (its account deleted), the page is read
// again and the stream sends what it shows now.
func TestTheLivePageOfAnEndedUnitIsNotReadWholeAgain(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_done", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "backup.sh"})
	e.run("acme", "a-1", now.Add(-59*time.Second), now.Add(-58*time.Second), &automatorv1.Result{Stdout: []byte("all saved")})
	reads := &countingReads{Store: e.st}
	_, base := e.start(replica{st: reads})
	c := client(t)
	e.signIn(c, base, "admin")
	events := openStream(t, c, base+"/dashboard/work/w_done")
	// Read to the end, once the test no longer does, so that the reader
	// is not left sending a keepalive no one receives.
	t.Cleanup(func() {
		go func() {
			for range events {
			}
		}()
	})
	next := func(what string) event {
		t.Helper()
		return nextUpdate(t, events, what)
	}
	if ev := next("the page"); ev.name != "update" || !strings.Contains(ev.data, "all saved") {
		t.Fatalf("first event %q:\n%s\nwant the page with the unit's output", ev.name, ev.data)
	}
	gets := reads.gets.Load()
	lists := reads.lists.Load()
	waittest.Until(t, "five refreshes of the page", func() bool { return reads.lists.Load() >= lists+5 })
	if n := reads.gets.Load(); n != gets {
		t.Errorf("the ended unit was read whole %d times more over five refreshes; want none", n-gets)
	}

	if _, err := e.st.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Reason: `account "acme" was deleted`, Now: now}); err != nil {
		t.Fatal(err)
	}
	if ev := next("the page of the deleted account's unit"); ev.name != "update" || !strings.Contains(ev.data, "acme (deleted ") || strings.Contains(ev.data, "all saved") {
		t.Errorf("after the account's deletion, event %q:\n%s\nwant the page under the deleted name, its output unreadable", ev.name, ev.data)
	}
}
