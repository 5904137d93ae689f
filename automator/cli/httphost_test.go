//go:build linux

package cli

import (
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
)

// getWithHost asks path of the HTTP listener at base with the Host header host
// and returns the status and body.
func getWithHost(t *testing.T, base, path, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestHTTPListenerRefusesAHostThatIsNotItsName: a web page that resolves
// a name of its own to the automator's HTTP listener (DNS rebinding) and
// asks it for what needs no key (/metrics with its account names, the
// dashboard's pages, the API's document) is refused: its browser sends
// that name as Host. The probes answer any Host; the automator's own
// names, and those of http_allowed_hosts, are answered.
func TestHTTPListenerRefusesAHostThatIsNotItsName(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAllowedHosts = []string{"metrics.corp.example", "*.lb.corp.example"}
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	s := serveDirInProcess(t, dir)
	s.account(t, "acme")
	_, port, _ := strings.Cut(strings.TrimPrefix(s.http, "http://"), ":")

	for _, path := range []string{"/metrics", "/dashboard/login", "/dashboard/static/style.css", "/v1/openapi.json", "/"} {
		code, body := getWithHost(t, s.http, path, "rebound.attacker.example:"+port)
		if code != http.StatusForbidden || strings.Contains(body, "acme") {
			t.Errorf("GET %s with Host rebound.attacker.example: %d %.80q...; want 403 without the answer", path, code, body)
		}
		if !strings.Contains(body, "http_allowed_hosts") {
			t.Errorf("GET %s with Host rebound.attacker.example: %.80q...; want the refusal to name http_allowed_hosts", path, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := getWithHost(t, s.http, path, "rebound.attacker.example:"+port); code != http.StatusOK {
			t.Errorf("GET %s with Host rebound.attacker.example: %d %q; want 200: a probe answers every Host", path, code, body)
		}
	}
	hostname, _ := os.Hostname()
	for _, host := range []string{
		"127.0.0.1:" + port, "127.0.0.1", "[::1]:" + port, "10.1.2.3:" + port, "localhost:" + port,
		"LOCALHOST.:" + port, "automator.localhost:" + port, hostname + ":" + port,
		"metrics.corp.example:" + port, "a.lb.corp.example",
	} {
		if code, body := getWithHost(t, s.http, "/metrics", host); code != http.StatusOK || !strings.Contains(body, `account="acme"`) {
			t.Errorf("GET /metrics with Host %s: %d; want 200 with the account's gauges", host, code)
		}
	}
	if code, _ := getWithHost(t, s.http, "/metrics", "lb.corp.example"); code != http.StatusForbidden {
		t.Errorf("GET /metrics with Host lb.corp.example: %d; want 403: *.lb.corp.example names the names under it only", code)
	}
	if n := strings.Count(s.log.String(), `"host":"rebound.attacker.example"`); n != 1 {
		t.Errorf("the log warns %d times of the refused host; want once:\n%s", n, s.log)
	}
}

// TestHTTPListenerAnswersTheNamesOfItsCertificate: the names of the
// server certificate in service, wildcards included, are names of the
// automator, also after a renewal that changes them.
func TestHTTPListenerAnswersTheNamesOfItsCertificate(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ca, err := pki.NewCA("test CA", now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(hosts ...string) *x509.Certificate {
		b, err := pki.NewServer(ca, hosts, now)
		if err != nil {
			t.Fatal(err)
		}
		c, err := pki.ParseCertPEM(b.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	served := leaf("automator.corp.example", "*.svc.corp.example")
	cfg := config.Default("https://public.corp.example:8443")
	g := newHostGuard(cfg, func() *x509.Certificate { return served }, slog.New(slog.DiscardHandler))
	for host, want := range map[string]bool{
		"automator.corp.example":      true,
		"q.svc.corp.example":          true,
		"public.corp.example":         true, // public_url's host
		"svc.corp.example":            false,
		"a.b.svc.corp.example":        false, // a wildcard is one label
		"automator.corp.example.evil": false,
		"renamed.corp.example":        false,
	} {
		if got := g.allowed(host); got != want {
			t.Errorf("allowed(%q) = %v, want %v", host, got, want)
		}
	}
	served = leaf("renamed.corp.example")
	if !g.allowed("renamed.corp.example") || g.allowed("automator.corp.example") {
		t.Errorf("after a renewal: the new certificate's names are not the ones answered")
	}
}
