package server_test

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

// claimOutlivingItsPoll holds every claim until its poll has ended, then
// makes it all the same: as the PostgreSQL store runs a claim sent before
// its poll ended to its end, and returns the units it committed.
type claimOutlivingItsPoll struct {
	store.Store
	entered chan struct{}
}

func (g *claimOutlivingItsPoll) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	g.entered <- struct{}{}
	<-ctx.Done()
	return g.Store.WorkClaim(context.WithoutCancel(ctx), p)
}

// syncLog is a log the server writes while the test may read it.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
	// grew, when not nil, is closed by the next write (awaitLines).
	grew chan struct{}
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.grew != nil {
		close(l.grew)
		l.grew = nil
	}
	return l.b.Write(p)
}

// awaitLines returns the lines holding every one of parts once there is
// one, failing the test if none is written within waittest.Bound; what
// says what the line stands for.
func (l *syncLog) awaitLines(t *testing.T, what string, parts ...string) []string {
	t.Helper()
	timer := time.NewTimer(waittest.Bound)
	defer timer.Stop()
	for {
		l.mu.Lock()
		out := l.linesLocked(parts...)
		if len(out) > 0 {
			l.mu.Unlock()
			return out
		}
		if l.grew == nil {
			l.grew = make(chan struct{})
		}
		grew := l.grew
		l.mu.Unlock()
		select {
		case <-grew:
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for %s", waittest.Bound, what)
		}
	}
}

// lines returns the lines written so far that contain every one of parts.
func (l *syncLog) lines(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.linesLocked(parts...)
}

func (l *syncLog) linesLocked(parts ...string) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		line := sc.Text()
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

// TestUnitsClaimedForAPollThatLeftFailAtOnce: a poll ends while its claim
// is under way, and the claim commits all the same (the PostgreSQL store
// runs a claim it sent to its end). Its units are stored as claimed by the
// poll's instance, which never receives them: they are never given to
// another (guarantee 1), and they fail at once rather than at their
// deadline, saying that their script did not run. The server logs a
// warning per unit naming it and the instance.
func TestUnitsClaimedForAPollThatLeftFailAtOnce(t *testing.T) {
	t.Parallel()
	gate := &claimOutlivingItsPoll{entered: make(chan struct{}, 1)}
	m := pollsClosed{closed: make(chan struct{}, 1)}
	log := &syncLog{}
	e := newEnv(t, envOptions{pollWindow: time.Minute, metrics: m, log: log,
		wrap: func(st store.Store) store.Store { gate.Store = st; return gate }})
	u := submit(t, e.callerClient(), e.account, time.Hour) // no poll waits: queued

	pctx, leave := context.WithCancel(t.Context())
	polled := pollAsync(pctx, e.proxyClient(), "a", 1)
	waittest.Recv(t, gate.entered, "the poll's claim to reach the store")
	leave()
	if r := waittest.Recv(t, polled, "the poll that left to end"); status.Code(r.err) != codes.Canceled {
		t.Fatalf("the poll that left: %v, want Canceled", r.err)
	}
	waittest.Recv(t, m.closed, "the poll to end on the server")

	w, err := e.store.WorkGet(t.Context(), u.GetWorkId())
	if err != nil {
		t.Fatal(err)
	}
	if want := "its claim never reached instance a: its poll ended while its claim was under way; the script did not run"; w.State != store.StateFailed || w.InstanceID != "a" || w.Reason != want {
		t.Fatalf("the unit is %s by %q (%q), want failed by a (%q)", w.State, w.InstanceID, w.Reason, want)
	}
	if got := log.lines("level=WARN", "never reached its proxy: failed", "work_id="+u.GetWorkId(), "instance_id=a "); len(got) != 1 {
		t.Errorf("warnings naming unit %s claimed by a: %q, want 1", u.GetWorkId(), got)
	}
}
