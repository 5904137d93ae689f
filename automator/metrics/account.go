package metrics

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opsgate/opsgate/automator/store"
)

var (
	descQueueDepth = prometheus.NewDesc("automator_queue_depth",
		"Units of work queued (not yet claimed), by account.", []string{"account"}, nil)
	descOldestAge = prometheus.NewDesc("automator_queue_oldest_age_seconds",
		"Age of the oldest queued unit, by account; 0 when none is queued.", []string{"account"}, nil)
	descInFlight = prometheus.NewDesc("automator_work_in_flight",
		"Units of work claimed and not yet ended, by account.", []string{"account"}, nil)
	descInstances = prometheus.NewDesc("automator_instances",
		fmt.Sprintf("Proxy instances that polled within %d days, by account.", store.InstanceForgetDays), []string{"account"}, nil)
	descOnline = prometheus.NewDesc("automator_instances_online",
		"Proxy instances that polled within two poll windows, did not say at that poll that they were stopping, and were not refused at it (for want of a usable key, or for an expired account token), by account.", []string{"account"}, nil)
	descRefused = prometheus.NewDesc("automator_instances_refused",
		"Proxy instances that polled within two poll windows, did not say at that poll that they were stopping, and were refused at it: for want of a usable key or for an expired account token (a profile of before a rotation), or for a key that is not the account's (a wrong key line); install the account's latest profile. By account.", []string{"account"}, nil)
)

// accountCollector reads the per-account gauges from the store at each
// scrape, so every replica sharing the store reports the same values.
//
// Scrapes that come while a read is in progress share it: /metrics needs
// no key, and without this whoever reaches the HTTP listener could run as
// many statistics queries at once as requests, holding the store's
// connections that polls, claims and results need.
type accountCollector struct {
	o   Options
	src StatsSource
	// known makes the queue counters of an account exist (Metrics.known).
	known func(account string)
	// failing: the last read failed. A store that does not answer is
	// logged once, not at every scrape, and so is its return.
	failing atomic.Bool

	mu     sync.Mutex
	read   *statsRead // in progress; nil when none
	joined int        // scrapes that shared a read in progress (tests)
}

// statsRead is one read of the statistics, shared by the scrapes that
// came while it was in progress; done closes when it has its answer.
type statsRead struct {
	done  chan struct{}
	now   time.Time
	stats []store.AccountStats
	err   error
}

// stats reads the statistics, or waits for the read in progress.
func (c *accountCollector) stats() *statsRead {
	c.mu.Lock()
	if r := c.read; r != nil {
		c.joined++
		c.mu.Unlock()
		<-r.done
		return r
	}
	r := &statsRead{done: make(chan struct{})}
	c.read = r
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), c.o.StatsTimeout)
	defer cancel()
	r.now = c.o.Now()
	r.stats, r.err = c.src.AccountStats(ctx, store.AccountStatsParams{OnlineSince: r.now.Add(-c.o.OnlineWithin)})
	c.mu.Lock()
	c.read = nil
	c.mu.Unlock()
	close(r.done)
	return r
}

func (c *accountCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueueDepth, descOldestAge, descInFlight, descInstances, descOnline, descRefused} {
		ch <- d
	}
}

func (c *accountCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.stats()
	now, stats := r.now, r.stats
	if err := r.err; err != nil {
		if !c.failing.Swap(true) {
			c.o.Logger.Warn("the per-account gauges are left out of /metrics: reading them from the store failed", "err", err)
		}
		return
	}
	if c.failing.Swap(false) {
		c.o.Logger.Info("the per-account gauges are served again: the store answers")
	}
	gauge := func(d *prometheus.Desc, v float64, account string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, account)
	}
	for _, a := range stats {
		c.known(a.Account)
		age := 0.0
		if a.Queued > 0 && !a.OldestQueuedAt.IsZero() {
			age = max(now.Sub(a.OldestQueuedAt), 0).Seconds()
		}
		gauge(descQueueDepth, float64(a.Queued), a.Account)
		gauge(descOldestAge, age, a.Account)
		gauge(descInFlight, float64(a.Claimed), a.Account)
		gauge(descInstances, float64(a.Instances), a.Account)
		gauge(descOnline, float64(a.InstancesOnline), a.Account)
		gauge(descRefused, float64(a.InstancesRefused), a.Account)
	}
}
