//go:build linux

package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
	proxycli "github.com/opsgate/opsgate/proxy/cli"
)

// served is `automator serve` running in this process.
type served struct {
	dir     string
	grpc    string // 127.0.0.1:PORT
	http    string // http://127.0.0.1:PORT
	log     *logtest.Buffer
	scripts string
	stop    func() // stops serve and waits for it; at the test's end if not before
}

// serveInProcess initialises a data directory with a 1 s poll window and
// runs `automator serve --log-format json` on it until the test ends.
func serveInProcess(t *testing.T) *served {
	t.Helper()
	return serveDirInProcess(t, initDir(t))
}

// serveDirInProcess is serveInProcess on a data directory made by initDir,
// serve given the flags more as well.
func serveDirInProcess(t *testing.T, dir string, more ...string) *served {
	t.Helper()
	s := &served{dir: dir, log: &logtest.Buffer{}, scripts: t.TempDir()}
	cfg, err := config.Load(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PollWindow = time.Second
	if err := config.Save(s.dir, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- Main(ctx, append([]string{"serve", "--data-dir", s.dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-format", "json"}, more...),
			Env{Stdout: io.Discard, Stderr: s.log})
	}()
	s.stop = sync.OnceFunc(func() {
		cancel()
		if code := waittest.Recv(t, done, "serve to return after its context was cancelled"); code != 0 {
			t.Errorf("serve exited %d:\n%s", code, s.log)
		}
	})
	t.Cleanup(s.stop)
	automatortest.WaitFor(t, 15*time.Second, "serve to write serving.yaml", func() bool {
		sv, ok, _ := config.ReadServing(s.dir)
		if ok {
			s.grpc, s.http = sv.GRPC, "http://"+sv.HTTP
		}
		return ok
	})
	return s
}

// account makes an account and returns its proxy config, pointed at the
// automator's actual gRPC address, with the test's scripts directory.
func (s *served) account(t *testing.T, name string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"account", "create", name, "--data-dir", s.dir}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("account create %s: %s", name, errb.String())
	}
	profile := regexp.MustCompile(`(?m)^automator_url: .*$`).ReplaceAllString(out.String(), "automator_url: https://"+s.grpc)
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(profile+"scripts_dir: "+s.scripts+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// proxy runs `proxy run --log-format json` in this process until the test
// ends, and returns its log.
func (s *served) proxy(t *testing.T, cfgPath, instance string) *logtest.Buffer {
	t.Helper()
	log := &logtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- proxycli.Main(ctx, []string{"run", "--config", cfgPath, "--instance-id", instance, "--log-format", "json"},
			proxycli.Env{Stdout: io.Discard, Stderr: log})
	}()
	t.Cleanup(func() { cancel(); waittest.Recv(t, done, "proxy run to return after its context was cancelled") })
	automatortest.WaitFor(t, 15*time.Second, "the proxy to poll", func() bool {
		return strings.Contains(log.String(), `"msg":"connected to the automator; polling"`)
	})
	return log
}

// tlsConfig trusts the data directory's CA, as a client of the gRPC
// listener that holds no profile does.
func (s *served) tlsConfig(t *testing.T) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(s.dir, config.FileCACert))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in the data directory's CA file")
	}
	return &tls.Config{RootCAs: roots, ServerName: "localhost"}
}

func (s *served) client(t *testing.T) *client.Client {
	t.Helper()
	cfg, _, err := clientConfig(s.dir, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// scrape reads /metrics and parses it as Prometheus does.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// metricValue is the value (a histogram's count) of the series of family
// name with exactly these labels; ok is false when there is none.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsCountAScriptedRun runs units with known outcomes through a
// real automator and a real proxy, then checks every metric of /metrics.
func TestMetricsCountAScriptedRun(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	acme := s.account(t, "acme")
	s.account(t, "lonely") // no proxy ever polls for it
	for name, body := range map[string]string{
		"ok.sh":    "echo ok",
		"exit.sh":  `exit "$1"`,
		"sleep.sh": `touch "$1"; exec sleep 60`,
	} {
		if err := os.WriteFile(filepath.Join(s.scripts, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	proxyLog := s.proxy(t, acme, "p1")
	c := s.client(t)
	ctx := t.Context()
	long := client.WithTimeout(time.Minute)

	// acme: 4 succeeded (one exits 3), 1 failed, 1 timed out while
	// claimed, 1 cancelled while claimed.
	for range 3 {
		if _, err := c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "ok.sh"}, long); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "exit.sh", Args: []string{"3"}}, long); err != nil || res.ExitCode != 3 {
		t.Fatalf("exit.sh 3: %+v, %v", res, err)
	}
	if _, err := c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "missing.sh"}, long); !errors.Is(err, client.ErrFailed) {
		t.Fatalf("missing.sh: %v, want failed", err)
	}
	started := filepath.Join(t.TempDir(), "started")
	if _, err := c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "sleep.sh", Args: []string{started}}, client.WithTimeout(time.Second)); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("sleep.sh with a 1s timeout: %v, want timed out", err)
	}
	marker := filepath.Join(t.TempDir(), "cancel-me")
	w, err := c.Submit(ctx, "acme", client.Command{Script: "sleep.sh", Args: []string{marker}}, long)
	if err != nil {
		t.Fatal(err)
	}
	automatortest.WaitFor(t, 10*time.Second, "the script to start", func() bool { _, err := os.Stat(marker); return err == nil })
	if w, err = c.Cancel(ctx, w.ID); err != nil || w.State != client.StateCancelled {
		t.Fatalf("cancel: %+v, %v", w, err)
	}
	// lonely: one times out unclaimed, one stays queued.
	if _, err := c.ExecuteOnProxy(ctx, "lonely", client.Command{Script: "ok.sh"}, client.WithTimeout(time.Second)); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("lonely with a 1s timeout: %v, want timed out", err)
	}
	queued, err := c.Submit(ctx, "lonely", client.Command{Script: "ok.sh"}, long)
	if err != nil {
		t.Fatal(err)
	}
	// A caller waits for it until the test stops waiting.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	waited := make(chan error, 1)
	go func() {
		_, err := c.Wait(waitCtx, queued.ID)
		waited <- err
	}()

	// The proxy sits in a long poll almost always; wait for a scrape that
	// catches it there, and the caller's wait open.
	var fams map[string]*dto.MetricFamily
	automatortest.WaitFor(t, 10*time.Second, "a scrape with the proxy's poll and the caller's wait open", func() bool {
		fams = scrape(t, s.http)
		polls, _ := metricValue(fams, "automator_polls_open", "account", "acme")
		waits, _ := metricValue(fams, "automator_waits_open", "account", "lonely")
		return polls == 1 && waits == 1
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"automator_work_queued_total", []string{"account", "acme"}, 7},
		{"automator_work_queued_total", []string{"account", "lonely"}, 2},
		{"automator_work_claimed_total", []string{"account", "acme"}, 7},
		{"automator_work_finished_total", []string{"account", "acme", "state", "succeeded"}, 4},
		{"automator_work_finished_total", []string{"account", "acme", "state", "failed"}, 1},
		{"automator_work_finished_total", []string{"account", "acme", "state", "timed_out"}, 1},
		{"automator_work_finished_total", []string{"account", "acme", "state", "cancelled"}, 1},
		{"automator_work_finished_total", []string{"account", "lonely", "state", "timed_out"}, 1},
		{"automator_work_queued_to_claimed_seconds", nil, 7},
		{"automator_work_queued_to_finished_seconds", []string{"state", "succeeded"}, 4},
		{"automator_work_queued_to_finished_seconds", []string{"state", "failed"}, 1},
		{"automator_work_queued_to_finished_seconds", []string{"state", "timed_out"}, 2},
		{"automator_work_queued_to_finished_seconds", []string{"state", "cancelled"}, 1},
		{"automator_queue_depth", []string{"account", "acme"}, 0},
		{"automator_queue_depth", []string{"account", "lonely"}, 1},
		{"automator_work_in_flight", []string{"account", "acme"}, 0},
		{"automator_instances", []string{"account", "acme"}, 1},
		{"automator_instances_online", []string{"account", "acme"}, 1},
		{"automator_instances_online", []string{"account", "lonely"}, 0},
		{"automator_queue_oldest_age_seconds", []string{"account", "acme"}, 0},
		{"automator_polls_open", []string{"account", "acme"}, 1},
		// Every ExecuteOnProxy of acme has ended, and its wait with it.
		{"automator_waits_open", []string{"account", "acme"}, 0},
		{"automator_store_call_seconds", []string{"method", "WorkEnqueue"}, 9},
	} {
		got, ok := metricValue(fams, c.name, c.labels...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if age, ok := metricValue(fams, "automator_queue_oldest_age_seconds", "account", "lonely"); !ok || age <= 0 || age > 60 {
		t.Errorf("oldest queued age of lonely = %v (present %v), want a few seconds", age, ok)
	}
	// The per-account gauges' own store read shows from the next scrape on.
	fams = scrape(t, s.http)
	for _, method := range []string{"WorkClaim", "WorkComplete", "InstanceSeen", "AccountStats"} {
		if n, ok := metricValue(fams, "automator_store_call_seconds", "method", method); !ok || n < 1 {
			t.Errorf("store calls of %s observed %v times, want some", method, n)
		}
	}
	// The SQLite store's writes, committed in batches: the 9 enqueues at
	// least, in no more batches than writes, taking some time.
	batches, _ := metricValue(fams, "automator_store_batches_total", "group", "write")
	writes, _ := metricValue(fams, "automator_store_batch_calls_total", "group", "write")
	busy, _ := metricValue(fams, "automator_store_batch_busy_seconds_total", "group", "write")
	if writes < 9 || batches < 1 || batches > writes || busy <= 0 {
		t.Errorf("store write batches: %v writes in %v batches, busy %v s; want at least the 9 enqueues, in 1 to that many batches, busy more than 0", writes, batches, busy)
	}
	// The caller that gives up its wait is no longer counted.
	stopWaiting()
	if err := waittest.Recv(t, waited, "the caller's wait to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("the wait the caller gave up: %v, want its context's cancel", err)
	}
	automatortest.WaitFor(t, 10*time.Second, "the wait given up to leave automator_waits_open", func() bool {
		waits, ok := metricValue(scrape(t, s.http), "automator_waits_open", "account", "lonely")
		return ok && waits == 0
	})

	// Health: alive, ready (the store answers, migrations done), and /
	// leads a browser to the dashboard.
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		resp, err := http.Get(s.http + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("GET %s: %s %q, want 200 %q", path, resp.Status, body, want)
		}
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := noFollow.Get(s.http + "/"); err != nil || resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/" {
		t.Errorf("GET /: %v %v, want a redirect to /dashboard/", resp, err)
	} else {
		resp.Body.Close()
	}

	// Both logs are JSON, one object per line, when asked.
	for name, log := range map[string]string{"automator": s.log.String(), "proxy": proxyLog.String()} {
		for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil {
				t.Errorf("%s log line is not a JSON record: %q", name, line)
			}
		}
	}
}

type pingerFunc func(context.Context) error

func (f pingerFunc) Ping(ctx context.Context) error { return f(ctx) }

// TestHealthzSaysShuttingDownOnceItIs: /healthz answers 200 while gRPC is
// served and 503 once the automator shuts down, when its gRPC listener is
// closed (DESIGN.md: 200 once it serves gRPC).
func TestHealthzSaysShuttingDownOnceItIs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stopping bool
		code     int
		body     string
	}{
		{false, http.StatusOK, "ok\n"},
		{true, http.StatusServiceUnavailable, "shutting down: gRPC is no longer served\n"},
	} {
		rec := httptest.NewRecorder()
		healthz(func() bool { return tc.stopping }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if rec.Code != tc.code || rec.Body.String() != tc.body {
			t.Errorf("shutting down %v: %d %q, want %d %q", tc.stopping, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
	}
}

// TestReadyzSaysNotReadyOnceShuttingDown: /readyz answers 503 once the
// automator is shutting down, when its calls answer UNAVAILABLE, though
// its store still answers; and 503 when the store check fails.
func TestReadyzSaysNotReadyOnceShuttingDown(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name     string
		ping     error
		stopping bool
		code     int
		body     string
	}{
		{"serving", nil, false, http.StatusOK, "ready\n"},
		{"shutting down", nil, true, http.StatusServiceUnavailable, "not ready: shutting down\n"},
		{"store down", errors.New("the database is gone"), false, http.StatusServiceUnavailable, readyzStoreDown + "\n"},
	} {
		rec := httptest.NewRecorder()
		readyz(pingerFunc(func(context.Context) error { return tc.ping }), func() bool { return tc.stopping }, log).
			ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != tc.code || rec.Body.String() != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.name, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
	}
}

// TestReadyzKeepsTheStoreErrorOutOfItsAnswer: /readyz needs no key, and
// the store's error names the database (a PostgreSQL host and user, a
// SQLite path): its 503 says that the store check failed, and the error
// itself goes to the log only.
func TestReadyzKeepsTheStoreErrorOutOfItsAnswer(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	down := errors.New("pinging postgres store postgres://automator@db-7.internal:5432/queue: connection refused")
	rec := httptest.NewRecorder()
	readyz(pingerFunc(func(context.Context) error { return down }), func() bool { return false }, log).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the store down: %d, want 503", rec.Code)
	}
	for _, secret := range []string{"db-7.internal", "automator@", "5432", "connection refused"} {
		if strings.Contains(rec.Body.String(), secret) {
			t.Errorf("/readyz answers %q, which shows %q of the store's error to anyone", rec.Body.String(), secret)
		}
	}
	if !strings.Contains(rec.Body.String(), "not ready") || !strings.Contains(rec.Body.String(), "log") {
		t.Errorf("/readyz answers %q; want it to say not ready and where the reason is", rec.Body.String())
	}
	if !strings.Contains(buf.String(), "db-7.internal:5432/queue: connection refused") {
		t.Errorf("the log does not have the store's error:\n%s", buf.String())
	}
}

// TestReadyzLogsWhenReadinessChanges: a load balancer checks /readyz every
// second or more often; while the store is down the log says so once, not
// at every check, says when it is back, and says it again if it goes down
// again.
func TestReadyzLogsWhenReadinessChanges(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var down error
	h := readyz(pingerFunc(func(context.Context) error { return down }), func() bool { return false }, log)
	check := func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/readyz", nil))
	}
	check()
	down = errors.New("the database is gone")
	for range 5 {
		check()
	}
	down = nil
	check()
	check()
	down = errors.New("the database is gone again")
	check()
	check()
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		got = append(got, l[strings.Index(l, "level="):])
	}
	want := []string{
		`level=WARN msg="not ready" err="the database is gone"`,
		`level=INFO msg="ready again"`,
		`level=WARN msg="not ready" err="the database is gone again"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReadyzCheckGivenUpByItsCallerChangesNothing: a check whose caller
// gave up (a load balancer's check timeout) before the store answered says
// nothing of the store: the log neither says "not ready" then "ready
// again", nor misses the store going down later.
func TestReadyzCheckGivenUpByItsCallerChangesNothing(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var down error
	h := readyz(pingerFunc(func(ctx context.Context) error {
		if ctx.Err() != nil {
			return fmt.Errorf("pinging sqlite store: %w", ctx.Err())
		}
		return down
	}), func() bool { return false }, log)
	check := func(ctx context.Context) {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/readyz", nil))
	}
	check(t.Context())
	gaveUp, cancel := context.WithCancel(t.Context())
	cancel()
	check(gaveUp)
	check(t.Context())
	down = errors.New("the database is gone")
	check(t.Context())
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		got = append(got, l[strings.Index(l, "level="):])
	}
	want := []string{`level=WARN msg="not ready" err="the database is gone"`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
