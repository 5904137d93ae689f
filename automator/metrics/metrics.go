// Package metrics is the automator's Prometheus instrumentation, served at
// /metrics on its HTTP listener:
//
//   - counters of units queued, claimed, finished (by terminal state) and
//     refused for a full queue, of results refused as not opening, and of
//     calls denied for an API key outside its accounts, and histograms of
//     the time from queueing to the claim and to the end, counted by the
//     replica that made each change (server.Metrics); the
//     units that `account delete` cancels, by an automator that serves
//     its store alone (SQLite) when it notices the deletion;
//   - the open polls and the calls waiting for a unit, per account, on
//     this replica;
//   - the latency of every store call, by method (Store wraps a store);
//   - the store's batches of calls run together (group commit), by group:
//     how many, how full, how busy (WatchBatches);
//   - per account, read from the store at each scrape and so the same on
//     every replica sharing it: queue depth, age of the oldest queued unit,
//     units in flight, instances known, online and refused.
//
// Every series is named automator_*, and README.md's table of metrics lists
// each family with its labels (TestEveryMetricIsDocumentedWithItsLabels in
// package server checks it against a scrape). No label holds a unit, a
// claim, an instance, an API key or an address, which callers and proxies
// choose: the series grow with the accounts only, and AccountGone drops a
// deleted account's. The registry is the automator's own, with the Go
// runtime and process collectors beside ours.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/opsgate/opsgate/automator/store"
)

// StatsSource is what the per-account gauges read at each scrape.
type StatsSource interface {
	AccountStats(ctx context.Context, p store.AccountStatsParams) ([]store.AccountStats, error)
}

// Options configure New.
type Options struct {
	// OnlineWithin is how recently an instance must have polled to count
	// as online (server.InstanceOnlineWithin of the poll window), unless
	// it said at that poll that it was stopping, or that poll was refused
	// (for want of a usable key, or for an expired account token).
	OnlineWithin time.Duration
	// StatsTimeout bounds the store read of one scrape (5 s).
	StatsTimeout time.Duration
	// Now tells the time (time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Buckets, in seconds. A unit waits for a claim from about a millisecond
// (an instance was polling) to its deadline: 5 minutes by default, up to a
// day (server.Options.MaxTimeout), and a wait past the last bucket would
// read as that bucket's bound in histogram_quantile. It ends up to a day
// after it was queued.
var (
	claimBuckets  = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600, 86400}
	finishBuckets = []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600, 86400}
	storeBuckets  = prometheus.ExponentialBuckets(0.0001, 4, 10) // 100µs to 26s
)

// Metrics implements server.Metrics and serves /metrics.
type Metrics struct {
	o           Options
	reg         *prometheus.Registry
	log         *slog.Logger
	queued      *prometheus.CounterVec
	claimed     *prometheus.CounterVec
	finished    *prometheus.CounterVec
	undelivered *prometheus.CounterVec
	authFailed  *prometheus.CounterVec
	authDenied  prometheus.Counter
	refused     *prometheus.CounterVec
	unopened    *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	claimWait   prometheus.Histogram
	finishWait  *prometheus.HistogramVec
	polls       *prometheus.GaugeVec
	waits       *prometheus.GaugeVec
	storeCalls  *prometheus.HistogramVec
	accepts     *prometheus.CounterVec
	httpCap     *prometheus.CounterVec
	accounts    *accountCollector // set by WatchAccounts
	// clockOffset is registered at its first value (ClockOffset): with
	// PostgreSQL only.
	clockOffset     prometheus.Gauge
	clockOffsetOnce sync.Once
}

// New registers the automator's metrics in a registry of their own.
func New(o Options) *Metrics {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StatsTimeout <= 0 {
		o.StatsTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m := &Metrics{
		o:   o,
		reg: prometheus.NewRegistry(),
		log: o.Logger,
		queued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_work_queued_total",
			Help: "Units of work queued, by account.",
		}, []string{"account"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_work_claimed_total",
			Help: "Units of work claimed by a proxy instance, by account.",
		}, []string{"account"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_work_finished_total",
			Help: "Units of work that reached a terminal state, by account and state (succeeded, failed, timed_out, cancelled).",
		}, []string{"account", "state"}),
		undelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_work_undelivered_total",
			Help: "Units of work failed because their claim never reached the proxy instance (the poll's answer was lost with its connection, or the poll ended first); their scripts did not run. By account.",
		}, []string{"account"}),
		authFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_auth_failures_total",
			Help: "Calls and dashboard sign-ins refused for a missing, wrong, expired or revoked token or API key, by outcome: unauthenticated (within the source's failure budget) or rate_limited (over it). The log writes at most 20 such lines a minute, and one counting the rest.",
		}, []string{"outcome"}),
		authDenied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "automator_auth_denied_total",
			Help: "Calls refused because their API key, valid, may not use the account they name (PERMISSION_DENIED) or whose unit they name (NOT_FOUND, as for an unknown unit); audited as auth.denied. The log writes at most 20 such lines a minute, and one counting the rest.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_work_refused_total",
			Help: "Units of work refused, nothing queued, by account and reason: queue_full (the account had limits.max_queued_per_account units queued; audited as work.refused). The log writes at most 20 such lines a minute, and one counting the rest.",
		}, []string{"account", "reason"}),
		unopened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_results_refused_total",
			Help: "Results posted by a proxy and refused because their sealed result did not open (tampered, sealed for another unit, or with a key the account no longer holds), by account. The unit stays claimed: a result that opens may still come, or it times out. Logged as result refused (one line per call).",
		}, []string{"account"}),
		claimWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "automator_work_queued_to_claimed_seconds",
			Help:    "Time from queueing a unit to its claim.",
			Buckets: claimBuckets,
		}),
		finishWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "automator_work_queued_to_finished_seconds",
			Help:    "Time from queueing a unit to its terminal state (the result, timeout or cancel), by state.",
			Buckets: finishBuckets,
		}, []string{"state"}),
		polls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "automator_polls_open",
			Help: "Long polls of proxy instances open on this automator, by account.",
		}, []string{"account"}),
		waits: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "automator_waits_open",
			Help: "Calls of callers waiting on this automator for a unit of work to end (ExecuteOnProxy, Wait), by account.",
		}, []string{"account"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_store_errors_total",
			Help: "Store calls that failed, by kind: unavailable (the database out of reach), storage_full (out of disk space), damaged (the database's files damaged: the calls that touch the damaged part fail until it is repaired), locked (SQLite: another program held the database locked past the 5 s wait for it) or other. The log writes one line for an outage of the database, and at most 20 a minute for a full disk, a damaged database and a locked one.",
		}, []string{"kind"}),
		clockOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "automator_clock_offset_seconds",
			Help: "This replica's clock minus its PostgreSQL server's, as last estimated (every 30 s, from a read of the database's clock whose round trip took under 500 ms). Positive: this replica's clock is ahead, so its sweeper times every replica's units out that much early; negative: behind, so it times them out that much late. The log warns while it is over 1 s either way. Only with PostgreSQL: with SQLite the database runs on the automator's own clock.",
		}),
		storeCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "automator_store_call_seconds",
			Help:    "Latency of store calls, by method.",
			Buckets: storeBuckets,
		}, []string{"method"}),
		accepts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_accept_waited_seconds_total",
			Help: "Time a listener did not accept new connections, by listener (grpc, http): the automator held all but the last of the file descriptors its limit allows (an eighth of the limit, from 8 to 64, kept for its database and files; on Linux), or an accept failed for want of descriptors or memory. Meanwhile new connections wait in the kernel's queue and those open are served. The log says when it begins and when it is over.",
		}, []string{"listener"}),
		httpCap: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "automator_http_connection_cap_total",
			Help: "What the HTTP listener did for a new connection at http_max_connections, by action: idle_closed (the connection idle the longest between requests, for 2 s at least, was closed to make room) or waited (every connection held was in a request or idle for less than 2 s, so the new one waited for one to close or to have been idle that long; the log warns, at most once a minute).",
		}, []string{"action"}),
	}
	m.reg.MustRegister(m.queued, m.claimed, m.finished, m.undelivered, m.refused, m.unopened, m.authFailed, m.authDenied, m.storeErrors, m.claimWait, m.finishWait, m.polls, m.waits, m.storeCalls, m.accepts, m.httpCap,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, st := range endStates {
		m.finishWait.WithLabelValues(string(st))
	}
	m.authFailed.WithLabelValues("unauthenticated")
	m.authFailed.WithLabelValues("rate_limited")
	// server.StoreError*: TestStoreErrorsAreCountedByKind checks they are these.
	for _, k := range []string{"unavailable", "storage_full", "damaged", "locked", "other"} {
		m.storeErrors.WithLabelValues(k)
	}
	for _, l := range []string{ListenerGRPC, ListenerHTTP} {
		m.accepts.WithLabelValues(l)
	}
	for _, a := range []string{HTTPCapIdleClosed, HTTPCapWaited} {
		m.httpCap.WithLabelValues(a)
	}
	return m
}

// The action label's values of automator_http_connection_cap_total.
const (
	HTTPCapIdleClosed = "idle_closed"
	HTTPCapWaited     = "waited"
)

// HTTPCap counts what the HTTP listener did for a new connection at its
// cap (HTTPCapIdleClosed, HTTPCapWaited).
func (m *Metrics) HTTPCap(action string) {
	m.httpCap.WithLabelValues(action).Inc()
}

// The listener label's values.
const (
	ListenerGRPC = "grpc"
	ListenerHTTP = "http"
)

// AcceptWaited counts a time d that listener (ListenerGRPC, ListenerHTTP)
// did not accept for want of file descriptors or memory.
func (m *Metrics) AcceptWaited(listener string, d time.Duration) {
	m.accepts.WithLabelValues(listener).Add(d.Seconds())
}

// endStates are the terminal states, the values of the state label.
var endStates = []store.State{store.StateSucceeded, store.StateFailed, store.StateTimedOut, store.StateCancelled}

// WatchAccounts adds the per-account gauges, read from src at each scrape
// (call it once). Each account they list also gets its queue counters, at
// 0 until its first event here: after a restart, or when its units are
// queued on another replica, that event would otherwise start its series
// and be hidden from rate() and increase().
func (m *Metrics) WatchAccounts(src StatsSource) {
	m.accounts = &accountCollector{o: m.o, src: src, known: m.known}
	m.reg.MustRegister(m.accounts)
}

// known makes the queue counters of account exist.
func (m *Metrics) known(account string) {
	m.queued.WithLabelValues(account)
	m.claimed.WithLabelValues(account)
	m.undelivered.WithLabelValues(account)
	m.refused.WithLabelValues(account, refusedQueueFull)
	m.unopened.WithLabelValues(account)
	for _, st := range endStates {
		m.finished.WithLabelValues(account, string(st))
	}
	// The open polls and waits too: an account none of whose proxies
	// polls this automator since it started (all stopped at once, say)
	// shows 0, which an alert can see, not no series, which it cannot
	// (a review).
	m.polls.WithLabelValues(account)
	m.waits.WithLabelValues(account)
}

// Handler serves the metrics in the Prometheus text (or OpenMetrics)
// format. A failed store read leaves out the per-account gauges, and is
// logged when it starts failing and when it answers again; the rest is
// served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      slogErrorLog{m.log},
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// Registry is where the metrics are registered, for tests and for more
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// refusedQueueFull is the reason label of a unit refused for a full queue.
const refusedQueueFull = "queue_full"

// WorkQueued counts a unit queued. It also makes the account's claimed,
// undelivered and refused counters exist at 0: a counter that appears only at its
// first event hides that event from rate() and increase(), and for the
// undelivered one, whose every event is a sign of trouble, that is the
// event to alert on.
func (m *Metrics) WorkQueued(account string) {
	m.queued.WithLabelValues(account).Inc()
	m.claimed.WithLabelValues(account)
	m.undelivered.WithLabelValues(account)
	m.refused.WithLabelValues(account, refusedQueueFull)
	m.unopened.WithLabelValues(account)
}

func (m *Metrics) WorkClaimed(account string, waited time.Duration) {
	m.claimed.WithLabelValues(account).Inc()
	m.claimWait.Observe(max(waited, 0).Seconds())
}

func (m *Metrics) WorkFinished(w store.Work) {
	m.finished.WithLabelValues(w.Account, string(w.State)).Inc()
	m.finishWait.WithLabelValues(string(w.State)).Observe(max(w.FinishedAt.Sub(w.QueuedAt), 0).Seconds())
}

func (m *Metrics) WorkUndelivered(account string) { m.undelivered.WithLabelValues(account).Inc() }

// AuthFailed counts a refused authentication (server.AuthMetrics).
func (m *Metrics) AuthFailed(limited bool) {
	if limited {
		m.authFailed.WithLabelValues("rate_limited").Inc()
		return
	}
	m.authFailed.WithLabelValues("unauthenticated").Inc()
}

// WorkRefused counts a unit refused for the account's full queue
// (server.RefusalMetrics).
func (m *Metrics) WorkRefused(account string) {
	m.refused.WithLabelValues(account, refusedQueueFull).Inc()
}

// ResultRefused counts a result of account refused because its sealed
// result did not open (server.RefusalMetrics).
func (m *Metrics) ResultRefused(account string) { m.unopened.WithLabelValues(account).Inc() }

// AuthDenied counts a call refused because its API key may not use the
// account it named (server.RefusalMetrics). No account label: the caller
// names the account, one that exists or not.
func (m *Metrics) AuthDenied() { m.authDenied.Inc() }

// StoreFailed counts a store call that failed (server.StoreMetrics).
func (m *Metrics) StoreFailed(kind string) { m.storeErrors.WithLabelValues(kind).Inc() }

// ClockOffset sets automator_clock_offset_seconds to the latest estimate
// of this replica's clock minus its database server's
// (server.ClockMetrics), registering it at the first: the server gives
// one with PostgreSQL only.
func (m *Metrics) ClockOffset(offset time.Duration) {
	m.clockOffsetOnce.Do(func() { m.reg.MustRegister(m.clockOffset) })
	m.clockOffset.Set(offset.Seconds())
}

// AccountDeleted drops the gauges of the polls and waits of account open
// here, at 0 once its deletion has woken them: served at 0 until the rest
// of its series go (AccountGone), they made an alert on an account no
// proxy polls fire for an account deleted on purpose, for ten minutes (a
// review). Its counters stay until then, for increase() to see their last
// events.
func (m *Metrics) AccountDeleted(account string) {
	l := prometheus.Labels{"account": account}
	m.polls.DeletePartialMatch(l)
	m.waits.DeletePartialMatch(l)
}

// AccountGone drops the series of account: it was deleted, a while ago,
// and is no account again (server.AccountMetrics). Without this every
// account ever deleted kept its counters, at their last values, in every
// scrape until the automator restarted.
func (m *Metrics) AccountGone(account string) {
	l := prometheus.Labels{"account": account}
	m.queued.DeletePartialMatch(l)
	m.claimed.DeletePartialMatch(l)
	m.finished.DeletePartialMatch(l)
	m.undelivered.DeletePartialMatch(l)
	m.refused.DeletePartialMatch(l)
	m.unopened.DeletePartialMatch(l)
	m.polls.DeletePartialMatch(l)
	m.waits.DeletePartialMatch(l)
}

func (m *Metrics) PollOpened(account string) func() {
	g := m.polls.WithLabelValues(account)
	g.Inc()
	return g.Dec
}

// WaitOpened counts a call waiting for a unit of account to end until the
// function returned is called (server.WaitMetrics).
func (m *Metrics) WaitOpened(account string) func() {
	g := m.waits.WithLabelValues(account)
	g.Inc()
	return g.Dec
}

// slogErrorLog is promhttp's error log on slog.
type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) {
	l.log.Warn("serving metrics", "err", slog.AnyValue(v))
}
