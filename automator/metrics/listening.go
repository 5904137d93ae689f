package metrics

import "github.com/prometheus/client_golang/prometheus"

// WatchListening adds automator_replica_listening, read from listening
// at each scrape: 1 while the automator hears the other replicas' queue
// events, 0 while it does not (serve adds it with PostgreSQL only).
func (m *Metrics) WatchListening(listening func() bool) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "automator_replica_listening",
		Help: "1 while this replica hears the queue events of the other replicas sharing its PostgreSQL database (LISTEN), 0 while it does not: their wake-ups then reach it only as its polls' windows end.",
	}, func() float64 {
		if listening() {
			return 1
		}
		return 0
	}))
}
