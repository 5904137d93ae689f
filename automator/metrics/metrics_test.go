package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scrape serves /metrics once and parses it.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample finds the metric of family name whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m := sample(fams, name, labels)
	if m == nil {
		t.Fatalf("no %s%v in the scrape", name, labels)
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("%s%v has no counter, gauge or histogram", name, labels)
	return 0
}

func TestQueueEventsAreCountedAndTimed(t *testing.T) {
	m := metrics.New(metrics.Options{})
	q := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.WorkQueued("acme")
	m.WorkQueued("acme")
	m.WorkQueued("globex")
	m.WorkClaimed("acme", 20*time.Millisecond)
	m.WorkClaimed("acme", 2*time.Second)
	m.WorkFinished(store.Work{Account: "acme", State: store.StateSucceeded, QueuedAt: q, FinishedAt: q.Add(3 * time.Second)})
	m.WorkFinished(store.Work{Account: "acme", State: store.StateTimedOut, QueuedAt: q, FinishedAt: q.Add(5 * time.Minute)})
	m.WorkUndelivered("acme")
	closeA := m.PollOpened("acme")
	closeB := m.PollOpened("acme")
	m.PollOpened("globex")
	closeA()
	endWait := m.WaitOpened("acme")
	m.WaitOpened("acme")
	endWait()

	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"automator_work_queued_total", map[string]string{"account": "acme"}, 2},
		{"automator_work_queued_total", map[string]string{"account": "globex"}, 1},
		{"automator_work_claimed_total", map[string]string{"account": "acme"}, 2},
		{"automator_work_finished_total", map[string]string{"account": "acme", "state": "succeeded"}, 1},
		{"automator_work_finished_total", map[string]string{"account": "acme", "state": "timed_out"}, 1},
		{"automator_work_undelivered_total", map[string]string{"account": "acme"}, 1},
		// At 0 from the account's first unit on, so that the first event shows in rate().
		{"automator_work_undelivered_total", map[string]string{"account": "globex"}, 0},
		{"automator_work_claimed_total", map[string]string{"account": "globex"}, 0},
		{"automator_work_queued_to_claimed_seconds", nil, 2},
		{"automator_work_queued_to_finished_seconds", map[string]string{"state": "timed_out"}, 1},
		{"automator_polls_open", map[string]string{"account": "acme"}, 1},
		{"automator_polls_open", map[string]string{"account": "globex"}, 1},
		{"automator_waits_open", map[string]string{"account": "acme"}, 1},
	} {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	h := sample(fams, "automator_work_queued_to_claimed_seconds", nil).GetHistogram()
	if got := h.GetSampleSum(); got < 2.019 || got > 2.021 {
		t.Errorf("queued-to-claimed sum = %v s, want 2.02", got)
	}
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 0.05 && b.GetCumulativeCount() != 1 {
			t.Errorf("queued-to-claimed bucket ≤50ms holds %d, want 1 (the 20ms claim)", b.GetCumulativeCount())
		}
	}
	if got := sample(fams, "automator_work_queued_to_finished_seconds", map[string]string{"state": "timed_out"}).GetHistogram().GetSampleSum(); got != 300 {
		t.Errorf("queued-to-finished sum of the timed-out unit = %v s, want 300", got)
	}
	closeB()
	if got := value(t, scrape(t, m), "automator_polls_open", map[string]string{"account": "acme"}); got != 0 {
		t.Errorf("polls open after both closed = %v, want 0", got)
	}
}

type fakeStats struct {
	stats []store.AccountStats
	err   error
	got   store.AccountStatsParams
}

func (f *fakeStats) AccountStats(_ context.Context, p store.AccountStatsParams) ([]store.AccountStats, error) {
	f.got = p
	return f.stats, f.err
}

func TestAccountGaugesAreReadFromTheStoreAtEachScrape(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := &fakeStats{stats: []store.AccountStats{
		{Account: "acme", Queued: 3, OldestQueuedAt: now.Add(-90 * time.Second), Claimed: 2, Instances: 4, InstancesOnline: 2, InstancesRefused: 1},
		{Account: "globex"},
	}}
	m := metrics.New(metrics.Options{OnlineWithin: 61 * time.Second, Now: func() time.Time { return now }})
	m.WatchAccounts(src)
	fams := scrape(t, m)
	if want := now.Add(-61 * time.Second); !src.got.OnlineSince.Equal(want) {
		t.Errorf("AccountStats asked with OnlineSince %v, want %v (now less OnlineWithin)", src.got.OnlineSince, want)
	}
	for _, c := range []struct {
		name, account string
		want          float64
	}{
		{"automator_queue_depth", "acme", 3},
		{"automator_queue_oldest_age_seconds", "acme", 90},
		{"automator_work_in_flight", "acme", 2},
		{"automator_instances", "acme", 4},
		{"automator_instances_online", "acme", 2},
		{"automator_instances_refused", "acme", 1},
		{"automator_queue_depth", "globex", 0},
		{"automator_queue_oldest_age_seconds", "globex", 0},
		{"automator_instances_online", "globex", 0},
		{"automator_instances_refused", "globex", 0},
	} {
		if got := value(t, fams, c.name, map[string]string{"account": c.account}); got != c.want {
			t.Errorf("%s{account=%q} = %v, want %v", c.name, c.account, got, c.want)
		}
	}

	// A store that does not answer leaves the gauges out, not the rest.
	src.err = errors.New("database is down")
	m.WorkQueued("acme")
	fams = scrape(t, m)
	if fams["automator_queue_depth"] != nil {
		t.Errorf("queue depth served although the store failed")
	}
	if got := value(t, fams, "automator_work_queued_total", map[string]string{"account": "acme"}); got != 1 {
		t.Errorf("queued total = %v with the store down, want 1", got)
	}
}

// openSQLite opens a SQLite store in a temporary directory.
func openSQLite(t *testing.T) *sqlitestore.Store {
	t.Helper()
	raw, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return raw
}

// createAndEnqueue makes account acme and queues 3 units on it, one
// write after another: 4 writes.
func createAndEnqueue(t *testing.T, st store.Store) {
	t.Helper()
	ctx := t.Context()
	now := time.Now()
	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("t"), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: string(rune('a' + i)), Account: "acme", KeyID: 1, SealedCommand: []byte("c"), Now: now, Deadline: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStoreCallsAreTimedByMethod(t *testing.T) {
	ctx := t.Context()
	m := metrics.New(metrics.Options{})
	st := m.Store(openSQLite(t))
	createAndEnqueue(t, st)
	// Errors pass through unchanged.
	if _, err := st.WorkGet(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("WorkGet of a missing unit through the wrapper: %v, want ErrNotFound", err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
	fams := scrape(t, m)
	for method, want := range map[string]float64{"AccountCreate": 1, "WorkEnqueue": 3, "WorkGet": 1, "Ping": 1} {
		if got := value(t, fams, "automator_store_call_seconds", map[string]string{"method": method}); got != want {
			t.Errorf("store calls of %s observed %v times, want %v", method, got, want)
		}
	}
	if !strings.HasPrefix(fams["automator_store_call_seconds"].GetHelp(), "Latency") {
		t.Errorf("store latency help = %q", fams["automator_store_call_seconds"].GetHelp())
	}
}

// TestStoreBatchesAreCounted: the SQLite store's writes show as batches of
// group "write". Writes made one after another go alone: one batch, one
// call and some busy time each; reads are not writes.
func TestStoreBatchesAreCounted(t *testing.T) {
	raw := openSQLite(t)
	m := metrics.New(metrics.Options{})
	m.WatchBatches(raw.BatchStats)
	write := map[string]string{"group": "write"}

	before := scrape(t, m)
	createAndEnqueue(t, raw)
	if _, err := raw.WorkGet(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	after := scrape(t, m)
	for name, want := range map[string]float64{"automator_store_batches_total": 4, "automator_store_batch_calls_total": 4} {
		if got := value(t, after, name, write) - value(t, before, name, write); got != want {
			t.Errorf("%s{group=\"write\"} rose by %v over four writes made one after another, want %v", name, got, want)
		}
	}
	if busy := value(t, after, "automator_store_batch_busy_seconds_total", write) - value(t, before, "automator_store_batch_busy_seconds_total", write); busy <= 0 {
		t.Errorf("automator_store_batch_busy_seconds_total{group=\"write\"} rose by %v over four writes, want more than 0", busy)
	}
	if got := after["automator_store_batches_total"].GetType(); got != dto.MetricType_COUNTER {
		t.Errorf("automator_store_batches_total is a %v, want a counter", got)
	}
}

// TestCountersOfEveryAccountExistAtZeroBeforeTheirFirstEvent: the queue
// counters of each account in the store are served at 0 before the
// account's first event on this automator, in every terminal state: a
// counter that appears at its first event hides that event from rate()
// and increase(). That holds after a restart too, and for units queued on
// another replica, when this automator has queued nothing for the account.
func TestCountersOfEveryAccountExistAtZeroBeforeTheirFirstEvent(t *testing.T) {
	src := &fakeStats{stats: []store.AccountStats{{Account: "acme"}}}
	m := metrics.New(metrics.Options{})
	m.WatchAccounts(src)
	scrape(t, m) // the first scrape may come before the series exist
	fams := scrape(t, m)
	acme := map[string]string{"account": "acme"}
	for _, name := range []string{"automator_work_queued_total", "automator_work_claimed_total", "automator_work_undelivered_total", "automator_work_refused_total"} {
		if s := sample(fams, name, acme); s == nil || s.GetCounter().GetValue() != 0 {
			t.Errorf("%s{account=\"acme\"} = %v before any event; want 0", name, s)
		}
	}
	// So are the gauges of open polls and waits: no poll since a restart
	// is 0, which an alert sees.
	for _, name := range []string{"automator_polls_open", "automator_waits_open"} {
		if s := sample(fams, name, acme); s == nil || s.GetGauge().GetValue() != 0 {
			t.Errorf("%s{account=\"acme\"} = %v before any poll or wait; want 0", name, s)
		}
	}
	for _, state := range []store.State{store.StateSucceeded, store.StateFailed, store.StateTimedOut, store.StateCancelled} {
		if s := sample(fams, "automator_work_finished_total", map[string]string{"account": "acme", "state": string(state)}); s == nil || s.GetCounter().GetValue() != 0 {
			t.Errorf("automator_work_finished_total{account=\"acme\",state=%q} = %v before any event; want 0", state, s)
		}
		if s := sample(fams, "automator_work_queued_to_finished_seconds", map[string]string{"state": string(state)}); s == nil || s.GetHistogram().GetSampleCount() != 0 {
			t.Errorf("automator_work_queued_to_finished_seconds{state=%q} = %v before any event; want an empty histogram", state, s)
		}
	}

	// The first timeout then shows as a rise from 0.
	q := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.WorkFinished(store.Work{Account: "acme", State: store.StateTimedOut, QueuedAt: q, FinishedAt: q.Add(time.Minute)})
	if got := value(t, scrape(t, m), "automator_work_finished_total", map[string]string{"account": "acme", "state": "timed_out"}); got != 1 {
		t.Errorf("automator_work_finished_total{account=\"acme\",state=\"timed_out\"} = %v after one timeout; want 1", got)
	}
}

// nilStore is a store.Store whose every call panics: the wrapper's timing
// is seen without a real store behind it.
type nilStore struct{ store.Store }

// TestEveryStoreCallIsTimed: each method of store.Store called through the
// wrapper is observed in automator_store_call_seconds under its name, so a
// slow call on a hot path (a token lookup, the audit log, the queue limit's
// count) shows there. Close is no call to time.
func TestEveryStoreCallIsTimed(t *testing.T) {
	m := metrics.New(metrics.Options{})
	st := reflect.ValueOf(m.Store(nilStore{}))
	iface := reflect.TypeFor[store.Store]()
	for i := range iface.NumMethod() {
		method := iface.Method(i)
		if method.Name == "Close" {
			continue
		}
		args := make([]reflect.Value, method.Type.NumIn())
		for j := range args {
			args[j] = reflect.Zero(method.Type.In(j))
		}
		func() {
			defer func() { _ = recover() }()
			st.MethodByName(method.Name).Call(args)
		}()
	}
	fams := scrape(t, m)
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		if name == "Close" {
			continue
		}
		if s := sample(fams, "automator_store_call_seconds", map[string]string{"method": name}); s.GetHistogram().GetSampleCount() != 1 {
			t.Errorf("automator_store_call_seconds{method=%q} counts %d calls after one; want 1", name, s.GetHistogram().GetSampleCount())
		}
	}
}

// TestStoreThatDoesNotAnswerIsLoggedOncePerChange: while the store does
// not answer the per-account gauges' read, every scrape leaves them out,
// and the log says so once, not at every scrape (Prometheus scrapes every
// few seconds); it says once when they are back.
func TestStoreThatDoesNotAnswerIsLoggedOncePerChange(t *testing.T) {
	var log strings.Builder
	src := &fakeStats{err: errors.New("reading account statistics: database is down")}
	m := metrics.New(metrics.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	m.WatchAccounts(src)
	for range 3 {
		if fams := scrape(t, m); fams["automator_queue_depth"] != nil {
			t.Fatalf("queue depth served although the store failed")
		}
	}
	src.err, src.stats = nil, []store.AccountStats{{Account: "acme"}}
	scrape(t, m)
	scrape(t, m)
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	down, back := 0, 0
	for _, l := range lines {
		switch {
		case strings.Contains(l, "level=WARN") && strings.Contains(l, "database is down"):
			down++
		case strings.Contains(l, "level=INFO") && strings.Contains(l, "per-account"):
			back++
		}
	}
	if down != 1 || back != 1 {
		t.Errorf("log over 3 scrapes with the store down and 2 with it back: %q; want one warning naming the error, then one line saying the gauges are back", lines)
	}
}

// TestFailedAuthenticationsAreCountedByOutcome: the automator tells its
// Metrics of every refused authentication (server.AuthMetrics), and
// /metrics shows them by outcome, both at 0 before the first: the log
// writes a bounded number of lines for them, the counter has them all.
func TestFailedAuthenticationsAreCountedByOutcome(t *testing.T) {
	m := metrics.New(metrics.Options{})
	var _ server.AuthMetrics = m
	for _, o := range []string{"unauthenticated", "rate_limited"} {
		if got := value(t, scrape(t, m), "automator_auth_failures_total", map[string]string{"outcome": o}); got != 0 {
			t.Errorf("automator_auth_failures_total{outcome=%q} = %v before any failure; want 0", o, got)
		}
	}
	for range 3 {
		m.AuthFailed(false)
	}
	m.AuthFailed(true)
	fams := scrape(t, m)
	if got := value(t, fams, "automator_auth_failures_total", map[string]string{"outcome": "unauthenticated"}); got != 3 {
		t.Errorf("automator_auth_failures_total{outcome=\"unauthenticated\"} = %v, want 3", got)
	}
	if got := value(t, fams, "automator_auth_failures_total", map[string]string{"outcome": "rate_limited"}); got != 1 {
		t.Errorf("automator_auth_failures_total{outcome=\"rate_limited\"} = %v, want 1", got)
	}
}

// TestStoreErrorsAreCountedByKind: the automator tells its Metrics of each
// store call that failed (server.StoreMetrics), and /metrics shows them by
// kind, each at 0 before the first: a full disk or an unreachable database
// shows there, where the log writes a bounded number of lines for it.
func TestStoreErrorsAreCountedByKind(t *testing.T) {
	m := metrics.New(metrics.Options{})
	var _ server.StoreMetrics = m
	kinds := []string{server.StoreErrorUnavailable, server.StoreErrorStorageFull, server.StoreErrorDamaged, server.StoreErrorLocked, server.StoreErrorOther}
	for _, k := range kinds {
		if got := value(t, scrape(t, m), "automator_store_errors_total", map[string]string{"kind": k}); got != 0 {
			t.Errorf("automator_store_errors_total{kind=%q} = %v before any error; want 0", k, got)
		}
	}
	for i, k := range kinds {
		for range i + 1 {
			m.StoreFailed(k)
		}
	}
	fams := scrape(t, m)
	for i, k := range kinds {
		if got := value(t, fams, "automator_store_errors_total", map[string]string{"kind": k}); got != float64(i+1) {
			t.Errorf("automator_store_errors_total{kind=%q} = %v, want %d", k, got, i+1)
		}
	}
}

// TestSlowStoreCallIsLogged: the store's calls that m.Store times are also
// watched for slow ones, which serve's log says (the threshold set to 0
// here, so that any call is slow).
func TestSlowStoreCallIsLogged(t *testing.T) {
	var buf bytes.Buffer
	m := metrics.New(metrics.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	st := m.Store(pingStore{})
	metrics.SetSlowStoreCall(st, 0)
	_ = st.Ping(t.Context())
	if !strings.Contains(buf.String(), `level=WARN msg="store calls were slow`) || !strings.Contains(buf.String(), "method=Ping") {
		t.Errorf("a slow Ping logged:\n%s", buf.String())
	}
}

// pingStore answers Ping.
type pingStore struct{ store.Store }

func (pingStore) Ping(context.Context) error { return nil }
