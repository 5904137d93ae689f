package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WatchCertificate adds automator_certificate_expiration_timestamp_seconds
// for the certificate called name ("server", "ca"): the end of its validity
// (NotAfter) as Unix seconds, read from notAfter at each scrape, so an alert
// can fire weeks before proxies start refusing it. Call it once per name.
func (m *Metrics) WatchCertificate(name string, notAfter func() time.Time) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "automator_certificate_expiration_timestamp_seconds",
		Help:        "When a TLS certificate of the automator stops being valid (its NotAfter), as Unix seconds: the server certificate it serves, and the CA that proxies' profiles trust.",
		ConstLabels: prometheus.Labels{"certificate": name},
	}, func() float64 { return float64(notAfter().Unix()) }))
}
