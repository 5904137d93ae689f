package metrics

import (
	"context"

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
		"Proxy instances that ever polled, by account.", []string{"account"}, nil)
	descOnline = prometheus.NewDesc("automator_instances_online",
		"Proxy instances that polled within two poll windows, by account.", []string{"account"}, nil)
)

// accountCollector reads the per-account gauges from the store at each
// scrape, so every replica sharing the store reports the same values.
type accountCollector struct {
	o   Options
	src StatsSource
}

func (c *accountCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueueDepth, descOldestAge, descInFlight, descInstances, descOnline} {
		ch <- d
	}
}

func (c *accountCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.StatsTimeout)
	defer cancel()
	now := c.o.Now()
	stats, err := c.src.AccountStats(ctx, store.AccountStatsParams{OnlineSince: now.Add(-c.o.OnlineWithin)})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descQueueDepth, err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, account string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, account)
	}
	for _, a := range stats {
		age := 0.0
		if a.Queued > 0 && !a.OldestQueuedAt.IsZero() {
			age = max(now.Sub(a.OldestQueuedAt), 0).Seconds()
		}
		gauge(descQueueDepth, float64(a.Queued), a.Account)
		gauge(descOldestAge, age, a.Account)
		gauge(descInFlight, float64(a.Claimed), a.Account)
		gauge(descInstances, float64(a.Instances), a.Account)
		gauge(descOnline, float64(a.InstancesOnline), a.Account)
	}
}
