package server_test

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// scrapeOfEveryFamily serves an automator's /metrics, its metrics made as
// `automator serve` makes them, over real HTTP, once the automator has
// units in every state, an instance online and one refused, and an
// account deleted, so that every family it exports has series; it returns
// one scrape in the Prometheus text format.
//
// automator_replica_listening and automator_clock_offset_seconds are
// PostgreSQL's: they are added here by hand, over SQLite, so that the
// scrape has them too.
func scrapeOfEveryFamily(t *testing.T) []byte {
	t.Helper()
	// Online (or refused) for an hour after a poll, rather than two poll
	// windows: the instances count however slow the machine.
	m := metrics.New(metrics.Options{OnlineWithin: time.Hour})
	e := newEnv(t, envOptions{metrics: m, sweepInterval: 20 * time.Millisecond, wrap: func(st store.Store) store.Store {
		m.WatchBatches(st.(*sqlitestore.Store).BatchStats)
		timed := m.Store(cachedCredentials(st))
		m.WatchAccounts(timed)
		return timed
	}})
	notAfter := time.Now().Add(90 * 24 * time.Hour)
	m.WatchCertificate("server", func() time.Time { return notAfter })
	m.WatchCertificate("ca", func() time.Time { return notAfter })
	m.WatchListening(func() bool { return true })
	m.ClockOffset(-20 * time.Millisecond)

	ctx := context.Background()
	caller, px := e.callerClient(), e.proxyClient()
	// timed_out.
	short := submit(t, caller, e.account, 10*time.Millisecond)
	if w, err := caller.Wait(ctx, &automatorv1.WaitRequest{WorkId: short.GetWorkId()}); err != nil || w.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Fatalf("waiting for a unit of 10 ms: %v, %v; want timed out", w.GetState(), err)
	}
	// cancelled while a caller waits for it (automator_waits_open).
	cancelled := submit(t, caller, e.account, time.Hour)
	waited := waitAsync(caller, cancelled.GetWorkId())
	waittest.Until(t, "the caller to wait for its unit", func() bool { return waitsOpen(t, m, e.account) == 1 })
	if _, err := caller.Cancel(ctx, &automatorv1.CancelRequest{WorkId: cancelled.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	if w := waittest.Recv(t, waited, "the wait for the cancelled unit to end"); w.st.GetState() != automatorv1.State_STATE_CANCELLED {
		t.Fatalf("waiting for a unit cancelled: %v, %v; want cancelled", w.st.GetState(), w.err)
	}
	// succeeded and failed, claimed by host-a, which polls and is online
	// (automator_polls_open).
	submit(t, caller, e.account, time.Hour)
	e.completeClaim(px, "host-a", claimOne(t, px, "host-a"))
	submit(t, caller, e.account, time.Hour)
	c := claimOne(t, px, "host-a")
	if _, err := px.Complete(ctx, &automatorv1.CompleteRequest{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "host-a",
		Outcome: automatorv1.Outcome_OUTCOME_FAILED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{ExitCode: 3}),
	}); err != nil {
		t.Fatal(err)
	}
	// claimed (in flight), then queued.
	submit(t, caller, e.account, time.Hour)
	claimOne(t, px, "host-a")
	submit(t, caller, e.account, time.Hour)
	// host-b holds no key of the account: refused.
	if _, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "host-b", MaxUnits: 1, Wait: durationpb.New(0), KeyIds: []uint32{9}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a poll holding no key of the account: %v; want FailedPrecondition", err)
	}
	// initech, with a unit queued, deleted as `automator account delete`
	// deletes it.
	e.addAccount("initech")
	submit(t, caller, "initech", time.Hour)
	e.deleteAccount("initech")
	// A caller's API key outside its accounts, and a wrong token.
	e.addAccount("globex")
	if _, err := automatorv1.NewAutomatorServiceClient(e.conn(e.addAPIKey("ak_globex", "globex"))).Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a unit with a key outside the account: %v; want PermissionDenied", err)
	}
	wrong, _ := crypto.NewToken("opt_")
	if _, err := automatorv1.NewProxyServiceClient(e.conn(wrong)).Poll(ctx, &automatorv1.PollRequest{InstanceId: "host-c", Wait: durationpb.New(0)}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a poll with a wrong token: %v; want Unauthenticated", err)
	}

	hs := httptest.NewServer(m.Handler())
	defer hs.Close()
	get := func() []byte {
		t.Helper()
		resp, err := http.Get(hs.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %s, %v", resp.Status, err)
		}
		return body
	}
	// The first scrape makes the queue counters of the accounts it reads
	// (metrics.WatchAccounts), which may come after their families were
	// gathered.
	get()
	body := get()
	// The scenario is what it says: in the gauges read from the store.
	for _, want := range []string{
		`automator_queue_depth{account="acme"} 1`, `automator_work_in_flight{account="acme"} 1`,
		`automator_instances_online{account="acme"} 1`, `automator_instances_refused{account="acme"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Fatalf("the scrape has no %s:\n%s", want, body)
		}
	}
	if strings.Contains(string(body), `automator_queue_depth{account="initech"}`) {
		t.Fatalf("the scrape has a queue depth of initech, deleted:\n%s", body)
	}
	return body
}

// TestMetricsPassPrometheusLint: a scrape of a serving automator, with
// series in every family it exports, passes promlint, Prometheus' own
// check of names, units, types and help: what dashboards, alerts and
// recording rules are written against.
func TestMetricsPassPrometheusLint(t *testing.T) {
	t.Parallel()
	problems, err := promlint.New(strings.NewReader(string(scrapeOfEveryFamily(t)))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// metricsTable is the README's table of metrics (its section Metrics):
// each family's type and labels, by name.
func metricsTable(t *testing.T) map[string]documented {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n### Metrics\n")
	if start < 0 {
		t.Fatal("README.md has no section Metrics")
	}
	section := readme[start+1:]
	if end := strings.Index(section[1:], "\n#"); end >= 0 {
		section = section[:end+1]
	}
	out := make(map[string]documented)
	for _, row := range strings.Split(section, "\n") {
		cells := strings.Split(row, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`automator_") {
			continue
		}
		var d documented
		d.typ = strings.TrimSpace(cells[2])
		for _, l := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(cells[3], -1) {
			d.labels = append(d.labels, l[1])
		}
		slices.Sort(d.labels)
		out[strings.Trim(strings.TrimSpace(cells[1]), "`")] = d
	}
	if len(out) == 0 {
		t.Fatal("README.md's section Metrics has no table of metrics")
	}
	return out
}

// documented is a row of the README's table of metrics.
type documented struct {
	typ    string // counter, gauge or histogram
	labels []string
}

// namesIn are the metric names that text mentions: a name such as
// automator_work_{queued,claimed}_total stands for each it spells, and one
// such as automator_store_batch* is a pattern (as a regular expression).
func namesIn(text string) []string {
	var out []string
	for _, n := range regexp.MustCompile(`automator_[a-z_]*(\{[a-z_]+(,[a-z_]+)+\}[a-z_]*|\*[a-z_]*)?`).FindAllString(text, -1) {
		if n == "automator_url" { // the proxy's setting
			continue
		}
		if open := strings.Index(n, "{"); open >= 0 {
			end := strings.Index(n, "}")
			for _, part := range strings.Split(n[open+1:end], ",") {
				out = append(out, n[:open]+part+n[end+1:])
			}
			continue
		}
		out = append(out, n)
	}
	return out
}

// TestEveryMetricIsDocumentedWithItsLabels: the README's table of metrics
// has a row for every automator_* family a serving automator exports, with
// its type and exactly its labels, and none for a family it does not
// export; and every metric the README and docs/ mention is exported: an
// operator writes alerts from them.
func TestEveryMetricIsDocumentedWithItsLabels(t *testing.T) {
	t.Parallel()
	table := metricsTable(t)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(scrapeOfEveryFamily(t))))
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "automator_") {
			continue // the Go runtime's and the process's, Prometheus' own
		}
		var labels []string
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		slices.Sort(labels)
		d, ok := table[name]
		switch typ := strings.ToLower(f.GetType().String()); {
		case !ok:
			t.Errorf("%s is served but has no row in README.md's table of metrics", name)
		case d.typ != typ:
			t.Errorf("%s is a %s; README.md's table says %s", name, typ, d.typ)
		case !slices.Equal(d.labels, labels):
			t.Errorf("%s has labels %v; README.md's table says %v", name, labels, d.labels)
		}
	}
	for name := range table {
		if fams[name] == nil {
			t.Errorf("README.md's table of metrics has %s, which is not served", name)
		}
	}

	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) < 5 {
		t.Fatalf("the docs: %v, %v", docs, err)
	}
	for _, file := range append(docs, "../../README.md") {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range namesIn(string(b)) {
			re := regexp.MustCompile("^" + strings.ReplaceAll(name, "*", "[a-z_]*") + "$")
			if !slices.ContainsFunc(slices.Collect(maps.Keys(fams)), re.MatchString) {
				t.Errorf("%s mentions %s, which is not served", filepath.Base(file), name)
			}
		}
	}
}
