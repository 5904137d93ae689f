package dashboard_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// statsReads records the account statistics each page reads (AccountStats,
// by the account asked for: "" for every account's), the account lists
// (AccountList) and the listings of units (WorkList).
type statsReads struct {
	store.Store
	mu           sync.Mutex
	stats        []string
	lists, works atomic.Int32
}

func (s *statsReads) AccountStats(ctx context.Context, p store.AccountStatsParams) ([]store.AccountStats, error) {
	s.mu.Lock()
	s.stats = append(s.stats, p.Account)
	s.mu.Unlock()
	return s.Store.AccountStats(ctx, p)
}

func (s *statsReads) AccountList(ctx context.Context) ([]store.Account, error) {
	s.lists.Add(1)
	return s.Store.AccountList(ctx)
}

func (s *statsReads) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	s.works.Add(1)
	return s.Store.WorkList(ctx, p)
}

// statsRead returns the accounts whose statistics were read so far and
// forgets them.
func (s *statsReads) statsRead() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats
	s.stats = nil
	return out
}

// nextUpdate returns the next event of a stream other than a keepalive.
func nextUpdate(t *testing.T, events <-chan event, what string) event {
	t.Helper()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before %s", what)
			}
			if ev.name != "keepalive" {
				return ev
			}
		case <-time.After(waittest.Bound):
			t.Fatalf("no %s within %v", what, waittest.Bound)
		}
	}
}

// TestTheInstancesPageOfOneAccountReadsThatAccountsStatisticsAlone: the
// page of one account, whole and at every refresh of its live page, reads
// the statistics of that account only, not every account's to find its
// row (a thousand accounts' at every refresh of every open tab); a name
// that is no account is still not found.
func TestTheInstancesPageOfOneAccountReadsThatAccountsStatisticsAlone(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_1", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "a.sh"})
	e.enqueue("w_2", "globex", now.Add(-time.Minute), &automatorv1.Command{Script: "g.sh"})
	e.poll("acme", "a-1", now)
	reads := &statsReads{Store: e.st}
	_, base := e.start(replica{st: reads})
	c := client(t)
	e.signIn(c, base, "admin")

	code, body := get(t, c, base+"/dashboard/accounts/acme")
	if code != http.StatusOK || !strings.Contains(body, `<dd id="account-queued">1</dd>`) || !strings.Contains(body, `data-instance="a-1"`) {
		t.Fatalf("the page of acme: %d\n%s\nwant its queue of 1 and its instance a-1", code, body)
	}
	if got := reads.statsRead(); !slices.Equal(got, []string{"acme"}) {
		t.Errorf("the page of acme read the statistics of %q; want acme's alone", got)
	}

	events := openStream(t, c, base+"/dashboard/accounts/acme")
	t.Cleanup(func() {
		go func() {
			for range events {
			}
		}()
	})
	if ev := nextUpdate(t, events, "the live page of acme"); ev.name != "update" || !strings.Contains(ev.data, `<dd id="account-queued">1</dd>`) {
		t.Fatalf("first event %q:\n%s\nwant the page of acme", ev.name, ev.data)
	}
	e.enqueue("w_3", "acme", now, &automatorv1.Command{Script: "a.sh"})
	if ev := nextUpdate(t, events, "the live page of acme with 2 queued"); ev.name != "update" || !strings.Contains(ev.data, `<dd id="account-queued">2</dd>`) {
		t.Fatalf("after a unit queued, event %q:\n%s\nwant the page of acme with 2 queued", ev.name, ev.data)
	}
	got := reads.statsRead()
	if len(got) < 2 || slices.ContainsFunc(got, func(a string) bool { return a != "acme" }) {
		t.Errorf("the live page of acme read the statistics of %q; want acme's alone, at every read", got)
	}

	if code, body := get(t, c, base+"/dashboard/accounts/nobody"); code != http.StatusNotFound || !strings.Contains(body, "There is no account") {
		t.Errorf("the page of no account: %d\n%s\nwant 404, no account", code, body)
	}
}

// TestTheWorkListReadsNoAccountStatistics: the work list's account filter
// needs the accounts' names, not their statistics (every account's queue
// and instances counted); and the live page, whose updates do not hold the
// filter, reads not even the names again at its refreshes.
func TestTheWorkListReadsNoAccountStatistics(t *testing.T) {
	e := newEnv(t)
	e.enqueue("w_1", "acme", e.clock.Now().Add(-time.Minute), &automatorv1.Command{Script: "a.sh"})
	reads := &statsReads{Store: e.st}
	_, base := e.start(replica{st: reads})
	c := client(t)
	e.signIn(c, base, "admin")

	code, body := get(t, c, base+"/dashboard/work?account=globex")
	if code != http.StatusOK || !strings.Contains(body, `<option value="acme">acme</option>`) ||
		!strings.Contains(body, `<option value="globex" selected>globex</option>`) {
		t.Fatalf("the work list: %d\n%s\nwant acme and globex (selected) in its account filter", code, body)
	}
	if got := reads.statsRead(); len(got) != 0 {
		t.Errorf("the work list read the statistics of %q; want none", got)
	}

	lists := reads.lists.Load()
	works := reads.works.Load()
	events := openStream(t, c, base+"/dashboard/work")
	t.Cleanup(func() {
		go func() {
			for range events {
			}
		}()
	})
	if ev := nextUpdate(t, events, "the live work list"); ev.name != "update" || !strings.Contains(ev.data, `data-work="w_1"`) {
		t.Fatalf("first event %q:\n%s\nwant the work list", ev.name, ev.data)
	}
	waittest.Until(t, "five refreshes of the live work list", func() bool { return reads.works.Load() >= works+5 })
	if got := reads.statsRead(); len(got) != 0 {
		t.Errorf("the live work list read the statistics of %q; want none", got)
	}
	if n := reads.lists.Load() - lists; n != 0 {
		t.Errorf("the live work list read the account list %d times over its refreshes; want none (its updates do not hold the filter)", n)
	}
}

// TestALiveRefreshThatFindsThePageAsItWasSendsNothing: a live page whose
// refreshes read and render it as it was sends nothing (its rendered
// content is compared with what it sent last), and sends the page again
// once it changes.
func TestALiveRefreshThatFindsThePageAsItWasSendsNothing(t *testing.T) {
	e := newEnv(t)
	e.poll("acme", "a-1", e.clock.Now())
	reads := &statsReads{Store: e.st}
	_, base := e.start(replica{st: reads})
	c := client(t)
	e.signIn(c, base, "viewer")
	events := openStream(t, c, base+"/dashboard/")
	t.Cleanup(func() {
		go func() {
			for range events {
			}
		}()
	})
	if ev := nextUpdate(t, events, "the live accounts page"); ev.name != "update" || !strings.Contains(ev.data, `<tr data-account="acme" class="status-online">`) {
		t.Fatalf("first event %q:\n%s\nwant the accounts page, acme online", ev.name, ev.data)
	}
	read := func() int {
		reads.mu.Lock()
		defer reads.mu.Unlock()
		return len(reads.stats)
	}
	// The clock stands still: the page reads the same at these refreshes.
	n := read()
	waittest.Until(t, "five refreshes of the live accounts page", func() bool { return read() >= n+5 })
	e.enqueue("w_1", "acme", e.clock.Now(), &automatorv1.Command{Script: "a.sh"})
	if ev := nextUpdate(t, events, "the live accounts page with a unit queued"); ev.name != "update" || !strings.Contains(ev.data, `<td class="num queued">1</td>`) {
		t.Errorf("the event after five refreshes of an unchanged page and a unit queued: %q:\n%s\nwant the page with the unit queued, and nothing before it", ev.name, ev.data)
	}
}
