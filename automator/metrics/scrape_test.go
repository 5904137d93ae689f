package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

// blockingStats answers AccountStats once release is closed, counting the
// calls in progress.
type blockingStats struct {
	release chan struct{}
	calls   atomic.Int32
}

func (b *blockingStats) AccountStats(ctx context.Context, _ store.AccountStatsParams) ([]store.AccountStats, error) {
	b.calls.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return []store.AccountStats{{Account: "acme", Queued: 4}}, nil
}

// TestConcurrentScrapesShareOneStoreRead: /metrics needs no key, so
// whoever reaches the HTTP listener may scrape it as often as it likes.
// Scrapes that come while the per-account statistics are being read share
// that read: the store runs one statistics query at a time however many
// scrapes wait, rather than one per request, which would take the store
// connections that polls, claims and results need. Each scrape gets the
// gauges.
func TestConcurrentScrapesShareOneStoreRead(t *testing.T) {
	src := &blockingStats{release: make(chan struct{})}
	m := metrics.New(metrics.Options{})
	m.WatchAccounts(src)

	const scrapes = 8
	bodies := make([]string, scrapes)
	var wg sync.WaitGroup
	get := func(i int) {
		defer wg.Done()
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		bodies[i] = rec.Body.String()
	}
	wg.Add(1)
	go get(0)
	waittest.Until(t, "the first scrape to read the store", func() bool { return src.calls.Load() == 1 })
	for i := 1; i < scrapes; i++ {
		wg.Add(1)
		go get(i)
	}
	waittest.Until(t, "the other scrapes to wait for the read in progress, or to read the store themselves", func() bool {
		return m.ScrapesJoined() == scrapes-1 || src.calls.Load() > 1
	})
	if n := src.calls.Load(); n != 1 {
		close(src.release)
		wg.Wait()
		t.Fatalf("%d statistics reads in progress at once for %d scrapes, want 1", n, scrapes)
	}
	close(src.release)
	waittest.Group(t, &wg, "the scrapes to be answered")
	for i, b := range bodies {
		if !strings.Contains(b, `automator_queue_depth{account="acme"} 4`) {
			t.Errorf("scrape %d has no queue depth of 4 for acme:\n%.500s", i, b)
		}
	}
}
