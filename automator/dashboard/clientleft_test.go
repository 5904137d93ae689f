package dashboard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

// stallingWorkList holds each listing of work, once armed, until its
// caller leaves, then fails it as a store does.
type stallingWorkList struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
}

func (s *stallingWorkList) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	if !s.armed.Load() {
		return s.Store.WorkList(ctx, p)
	}
	s.entered <- struct{}{}
	<-ctx.Done()
	return nil, fmt.Errorf("listing work: %w", ctx.Err())
}

// lineWriter hands over each log line written.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// TestPageLeftByItsVisitorIsNoError: a visitor who leaves a page (closes
// the tab, clicks elsewhere) while it is being read from the store is no
// error of the automator's: the log has no ERROR "could not read its
// store" line for it.
func TestPageLeftByItsVisitorIsNoError(t *testing.T) {
	e := newEnv(t)
	st := &stallingWorkList{Store: e.st, entered: make(chan struct{}, 1)}
	lines := make(lineWriter, 100)
	_, base := e.start(replica{st: st, opts: func(o *dashboard.Options) {
		o.Logger = slog.New(slog.NewTextHandler(lines, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	c := client(t)
	e.signIn(c, base, "admin")
	for len(lines) > 0 {
		<-lines // the sign-in's
	}

	st.armed.Store(true)
	ctx, leave := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/dashboard/work", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waittest.Recv(t, st.entered, "the work page to read the store")
	leave()
	waittest.Recv(t, done, "the request to end once left")
	if line := waittest.Recv(t, lines, "the dashboard to log the page it could not finish"); strings.Contains(line, "level=ERROR") {
		t.Errorf("a page its visitor left is logged as an error: %s", line)
	}
}

// TestLiveStreamLeftByItsVisitorIsNoWarning: a visitor who leaves a live
// page while its event stream reads the store again (a soak with
// dashboards opened and closed logged "refreshing a live page" warnings
// of "context canceled" for it) ends the stream without a warning.
func TestLiveStreamLeftByItsVisitorIsNoWarning(t *testing.T) {
	e := newEnv(t)
	st := &stallingWorkList{Store: e.st, entered: make(chan struct{}, 1)}
	var warned atomic.Value
	lines := lineFunc(func(line string) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			warned.Store(line)
		}
	})
	d, base := e.start(replica{st: st, opts: func(o *dashboard.Options) {
		o.Logger = slog.New(slog.NewTextHandler(lines, nil))
		o.Refresh = 10 * time.Millisecond
	}})
	c := client(t)
	e.signIn(c, base, "admin")

	ctx, leave := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/dashboard/work", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event stream of the work page: %s; want 200", resp.Status)
	}
	// The stream has begun (its first read is done): the next refresh
	// stalls in the store until the visitor leaves.
	st.armed.Store(true)
	waittest.Recv(t, st.entered, "the live work page to read the store again")
	leave()
	wctx, cancel := context.WithTimeout(t.Context(), waittest.Bound)
	defer cancel()
	if err := d.WaitStreamsEnded(wctx, 1); err != nil {
		t.Fatalf("the stream its visitor left did not end: %v", err)
	}
	if line, ok := warned.Load().(string); ok {
		t.Errorf("a live page its visitor left is logged as a problem: %s", line)
	}
}

// lineFunc hands each log line written to a function.
type lineFunc func(string)

func (f lineFunc) Write(p []byte) (int, error) {
	f(string(p))
	return len(p), nil
}
