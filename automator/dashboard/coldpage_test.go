package dashboard_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// unitReads counts the reads of units: listings with and without their
// sealed blobs, and reads of one unit; and records the most units a
// listing with their blobs asked for.
type unitReads struct {
	store.Store
	mu                   sync.Mutex
	whole, bare, oneUnit int
	wholeMax             int
}

func (r *unitReads) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	r.mu.Lock()
	if p.WithoutSealed {
		r.bare++
	} else {
		r.whole++
		r.wholeMax = max(r.wholeMax, p.Limit)
	}
	r.mu.Unlock()
	return r.Store.WorkList(ctx, p)
}

func (r *unitReads) WorkGet(ctx context.Context, id string) (store.Work, error) {
	r.mu.Lock()
	r.oneUnit++
	r.mu.Unlock()
	return r.Store.WorkGet(ctx, id)
}

// since returns the reads counted since the last call, as
// "whole/bare/one".
func (r *unitReads) since() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf("%d/%d/%d", r.whole, r.bare, r.oneUnit)
	r.whole, r.bare, r.oneUnit = 0, 0, 0
	return s
}

// exit is a work page's cell of exit code n.
func exit(n int) string { return fmt.Sprintf(`<td class="num exit-code">%d</td>`, n) }

// TestWorkPageNotOpenedYetIsListedWithItsBlobs: a page of work none of
// whose units the automator has opened (its first since it started) is
// listed without the units' sealed blobs, then again with them, a few
// units (dashboard.WholeChunk) a listing, rather than with one read of
// each unit; read again (a live page's refresh), it is listed without the
// blobs and nothing else is read; a unit that ended since is read alone,
// the page's other blobs left unread.
func TestWorkPageNotOpenedYetIsListedWithItsBlobs(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	size := 2*dashboard.WholeChunk + 3
	for i := range size {
		at := now.Add(time.Duration(i-100) * time.Minute)
		e.enqueue(fmt.Sprintf("w_%d", i), "acme", at, &automatorv1.Command{Script: "report.sh"})
		e.run("acme", "a-1", at.Add(time.Second), at.Add(2*time.Second), &automatorv1.Result{ExitCode: int32(40 + i)})
	}
	reads := &unitReads{Store: e.st}
	srv, err := server.New(server.Options{Store: reads, MasterKey: e.master, PollWindow: pollWindow, Clock: e.clock,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_, base := e.start(replica{st: reads, srv: srv, opts: func(o *dashboard.Options) { o.PageSize = size }})
	c := client(t)
	e.signIn(c, base, "admin")

	page := func(want ...string) {
		t.Helper()
		_, body := get(t, c, base+"/dashboard/work")
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("the page lacks %q:\n%s", w, body)
			}
		}
	}
	reads.since()
	page("<code>report.sh</code>", exit(40), exit(41), exit(40+size-1))
	if got := reads.since(); got != "3/1/0" || reads.wholeMax > dashboard.WholeChunk {
		t.Errorf("reads of a page of %d units not opened yet (listings with blobs/without/units read alone): %s, up to %d units a listing with blobs; want 3/1/0, at most %d",
			size, got, reads.wholeMax, dashboard.WholeChunk)
	}
	page("<code>report.sh</code>", exit(40), exit(41), exit(40+size-1))
	if got := reads.since(); got != "0/1/0" {
		t.Errorf("reads of the page read again: %s; want 0/1/0", got)
	}

	at := now.Add(-time.Minute)
	e.enqueue("w_new", "acme", at, &automatorv1.Command{Script: "report.sh"})
	e.run("acme", "a-1", at.Add(time.Second), at.Add(2*time.Second), &automatorv1.Result{ExitCode: 99})
	page(exit(99), exit(40+size-1))
	if got := reads.since(); got != "0/1/1" {
		t.Errorf("reads of the page with a unit ended since: %s; want 0/1/1", got)
	}
}
