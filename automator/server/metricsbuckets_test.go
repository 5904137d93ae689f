package server_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/opsgate/opsgate/automator/metrics"
)

// scrapeHTTP serves m's /metrics on a real HTTP listener and scrapes it
// once, parsed as Prometheus parses it.
func scrapeHTTP(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	hs := httptest.NewServer(m.Handler())
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/metrics")
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
		t.Fatal(err)
	}
	return fams
}

// TestAClaimAfterFortyMinutesInTheQueueFallsInAFiniteBucket: a unit may
// wait for its claim as long as its timeout, up to a day (a proxy down, the
// unit's timeout an hour), and automator_work_queued_to_claimed_seconds
// has buckets up to a day: with its last at 300 s, the default timeout,
// every longer wait fell in +Inf alone, and histogram_quantile said 300 s
// of a wait of forty minutes.
func TestAClaimAfterFortyMinutesInTheQueueFallsInAFiniteBucket(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	m := metrics.New(metrics.Options{})
	e := newEnv(t, envOptions{clock: clock, metrics: m})
	submit(t, e.callerClient(), e.account, 2*time.Hour)
	clock.Advance(40 * time.Minute)
	claimOne(t, e.proxyClient(), "host-a")

	f := scrapeHTTP(t, m)["automator_work_queued_to_claimed_seconds"]
	if len(f.GetMetric()) != 1 || f.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Fatalf("automator_work_queued_to_claimed_seconds: %v; want one claim", f)
	}
	h := f.GetMetric()[0].GetHistogram()
	if got := h.GetSampleSum(); got < 40*60 {
		t.Fatalf("the claim waited %v s; want 40 minutes at least", got)
	}
	held := false // by a finite bucket
	for _, b := range h.GetBucket() {
		held = held || (b.GetCumulativeCount() == 1 && !math.IsInf(b.GetUpperBound(), 1))
	}
	if !held {
		t.Errorf("a claim after %v s in the queue is in no finite bucket (%v): histogram_quantile cannot tell it from a claim at the last",
			h.GetSampleSum(), h.GetBucket())
	}
}
