//go:build linux

package cli

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
)

// TestCertificateEndsAreOnMetricsAndWarnedOf: serve puts the end of the
// certificate it serves and of the CA on /metrics, and warns in its log of a
// server certificate that ends within 30 days, saying how to renew it.
func TestCertificateEndsAreOnMetricsAndWarnedOf(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	path := func(name string) string { return filepath.Join(dir, name) }
	var ca pki.Bundle
	var err error
	if ca.CertPEM, err = os.ReadFile(path(config.FileCACert)); err != nil {
		t.Fatal(err)
	}
	if ca.KeyPEM, err = os.ReadFile(path(config.FileCAKey)); err != nil {
		t.Fatal(err)
	}
	// A server certificate from the data directory's CA with ten days left.
	short, err := pki.NewServer(ca, pki.ServerHosts("127.0.0.1"), time.Now().Add(10*24*time.Hour-pki.ServerValidity))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path(config.FileKey), short.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path(config.FileCert), short.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	serverCert, err := pki.ParseCertPEM(short.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := pki.ParseCertPEM(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}

	s := serveDirInProcess(t, dir)
	fams := scrape(t, s.http)
	for name, want := range map[string]time.Time{"server": serverCert.NotAfter, "ca": caCert.NotAfter} {
		if got, ok := metricValue(fams, "automator_certificate_expiration_timestamp_seconds", "certificate", name); !ok || got != float64(want.Unix()) {
			t.Errorf("automator_certificate_expiration_timestamp_seconds{certificate=%q} = %v (present %v), want %d", name, got, ok, want.Unix())
		}
	}
	warning := "the server certificate expires in 9 days: proxies will refuse it then; renew it with `automator cert renew --data-dir " + dir + "`"
	if log := s.log.String(); !strings.Contains(log, warning) || strings.Contains(log, "the CA certificate") {
		t.Errorf("serve's log does not warn of the server certificate alone; want %q in:\n%s", warning, log)
	}

	// A certificate renewed as serve runs, with five days left: /metrics
	// and the log say so within seconds, though no new connection made a
	// handshake that would put it in service (a review: the alert on the
	// old one's end kept firing while proxies kept their connections).
	renewed, err := pki.NewServer(ca, pki.ServerHosts("127.0.0.1"), time.Now().Add(5*24*time.Hour-pki.ServerValidity))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		pem  []byte
	}{{config.FileKey, renewed.KeyPEM}, {config.FileCert, renewed.CertPEM}} {
		if err := os.WriteFile(path(f.name+".new"), f.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path(f.name+".new"), path(f.name)); err != nil {
			t.Fatal(err)
		}
	}
	renewedCert, err := pki.ParseCertPEM(renewed.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	renewedWarning := "the server certificate expires in 4 days"
	automatortest.WaitFor(t, 3*pki.DefaultReloadEvery, "the renewed certificate's end on /metrics and its warning in the log", func() bool {
		got, ok := metricValue(scrape(t, s.http), "automator_certificate_expiration_timestamp_seconds", "certificate", "server")
		return ok && got == float64(renewedCert.NotAfter.Unix()) && strings.Contains(s.log.String(), renewedWarning)
	})
	if log := s.log.String(); !strings.Contains(log, "renewed server certificate loaded") {
		t.Errorf("serve's log does not say the renewed certificate was loaded:\n%s", log)
	}
}

// TestWarnOfEnd: a certificate is warned of in its last 30 days, and its end
// is an error once passed; before that, nothing is said.
func TestWarnOfEnd(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		end  time.Time
		want string
	}{
		{now.Add(31 * 24 * time.Hour), ""},
		{now.Add(29*24*time.Hour + time.Hour), `level=WARN msg="the cert expires in 29 days: proxies will refuse it then; renew it"`},
		{now.Add(time.Hour), `level=WARN msg="the cert expires in less than a day: proxies will refuse it then; renew it"`},
		{now.Add(-3*24*time.Hour - time.Hour), `level=ERROR msg="the cert expired 3 days ago: proxies refuse it; renew it"`},
	} {
		var buf bytes.Buffer
		warnOfEnd(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: dropTime})), now, c.end, "the cert", "renew it")
		if got := strings.TrimSpace(buf.String()); (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("ending at %v: logged %q, want %q", c.end.Sub(now), got, c.want)
		}
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
