package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/opsgate/opsgate/internal/batch"
)

// BatchSource returns, by group, what a store ran in shared batches (group
// commit): the SQLite store's writes ("write": one transaction per batch,
// made durable by one fsync at most), the PostgreSQL store's writes and reads of single units
// ("write", "read": one pipeline per batch).
type BatchSource func() map[string]batch.Stats

var (
	descBatches = prometheus.NewDesc("automator_store_batches_total",
		"Batches the store ran, by group: each SQLite write batch is one transaction, with one fsync at most; each PostgreSQL batch one pipeline of statements.", []string{"group"}, nil)
	descBatchItems = prometheus.NewDesc("automator_store_batch_calls_total",
		"Store calls run in those batches, by group; over the batches, the mean batch.", []string{"group"}, nil)
	descBatchBusy = prometheus.NewDesc("automator_store_batch_busy_seconds_total",
		"Time a batch of the group was running, by group. A group runs one batch at a time, so its rate is how busy that lane is: near 1, calls queue for it.", []string{"group"}, nil)
)

// WatchBatches adds the batch counters of src (call it once).
func (m *Metrics) WatchBatches(src BatchSource) {
	m.reg.MustRegister(batchCollector{src})
}

type batchCollector struct{ src BatchSource }

func (c batchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBatches
	ch <- descBatchItems
	ch <- descBatchBusy
}

func (c batchCollector) Collect(ch chan<- prometheus.Metric) {
	for group, s := range c.src() {
		ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(s.Batches), group)
		ch <- prometheus.MustNewConstMetric(descBatchItems, prometheus.CounterValue, float64(s.Items), group)
		ch <- prometheus.MustNewConstMetric(descBatchBusy, prometheus.CounterValue, s.Busy.Seconds(), group)
	}
}
