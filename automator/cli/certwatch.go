package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/pki"
)

// certWarnBefore is how long before its end a certificate is warned of.
const certWarnBefore = 30 * 24 * time.Hour

// certCheckEvery is how often serve looks at the certificates' ends again.
const certCheckEvery = 24 * time.Hour

// watchCertificates puts the end of the served certificate and of the CA
// on /metrics (automator_certificate_expiration_timestamp_seconds) and
// warns in the log while either ends within certWarnBefore: at the start,
// when a renewed server certificate is put in service, and then once a
// day, until ctx ends. Proxies refuse an expired
// certificate, so every instance of every account would go offline at
// once, with nothing in the automator's log to say why.
func watchCertificates(ctx context.Context, certs *pki.CertReloader, dir string, m *metrics.Metrics, log *slog.Logger) {
	if certs == nil {
		return // plaintext: no certificate in service
	}
	served := func() time.Time { return notAfter(certs.Certificate()) }
	m.WatchCertificate("server", served)
	var ca time.Time
	caFile := filepath.Join(dir, config.FileCACert)
	if c, err := readCertPEM(caFile); err != nil {
		log.Warn("the CA certificate's end is not watched", "err", err)
	} else {
		ca = c.NotAfter
		m.WatchCertificate("ca", func() time.Time { return ca })
	}
	check := func() {
		now := time.Now()
		warnOfEnd(log, now, served(), "the server certificate", fmt.Sprintf("renew it with `automator cert renew --data-dir %s` (profiles stay valid)", dir))
		if !ca.IsZero() {
			warnOfEnd(log, now, ca, "the CA certificate "+caFile, "every proxy profile trusts it: make a new CA and give every proxy a new profile")
		}
	}
	check()
	// The files are looked at as often as the handshakes may look
	// (pki.DefaultReloadEvery), so that a renewed certificate is logged
	// as loaded, and warned of if it too ends soon, within that long of
	// its renewal, not at the first new connection after it; and once a
	// day besides.
	end, checked := served(), time.Now()
	every(ctx, pki.DefaultReloadEvery, func() {
		if e := notAfter(certs.Look()); !e.Equal(end) || time.Since(checked) >= certCheckEvery {
			end, checked = e, time.Now()
			check()
		}
	})
}

// warnOfEnd logs what, ending at end, when that is within certWarnBefore of
// now: a warning before, an error after.
func warnOfEnd(log *slog.Logger, now, end time.Time, what, remedy string) {
	left := end.Sub(now)
	switch {
	case left <= 0:
		log.Error(fmt.Sprintf("%s expired %s ago: proxies refuse it; %s", what, days(-left), remedy), "not_after", end)
	case left < certWarnBefore:
		log.Warn(fmt.Sprintf("%s expires in %s: proxies will refuse it then; %s", what, days(left), remedy), "not_after", end)
	}
}

// days says d in whole days, or "less than a day".
func days(d time.Duration) string {
	switch n := int(d / (24 * time.Hour)); n {
	case 0:
		return "less than a day"
	case 1:
		return "1 day"
	default:
		return fmt.Sprintf("%d days", n)
	}
}

// notAfter is the end of c's leaf certificate.
func notAfter(c *tls.Certificate) time.Time {
	if c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return time.Time{}
	}
	return leaf.NotAfter
}

// readCertPEM reads the first certificate of a PEM file.
func readCertPEM(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := pki.ParseCertPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
