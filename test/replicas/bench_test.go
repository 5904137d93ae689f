//go:build linux

package replicas

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// BenchmarkCrossReplicaWakeUp measures the cross-replica wake-up: a unit
// queued on replica A (Submit) reaches an instance long-polling replica B
// (its Poll returns the claim). Each iteration is one sample: the time from
// the Submit call on A to the Poll answer on B, both over gRPC with TLS, the
// way a caller and a proxy see them. It reports the median and the 99th
// percentile.
//
//	go test -run '^$' -bench CrossReplicaWakeUp -benchtime 400x ./test/replicas/
func BenchmarkCrossReplicaWakeUp(b *testing.B) {
	c := newCluster(b, pgtest.DSN(b), 2)
	c.Start(b)
	profile := c.createAccount(b, "acme")
	callerA := c.callers(b)[0]
	proxyB := automatorv1.NewProxyServiceClient(c.dial(b, c.Replicas[1], profileValue(b, profile, "token")))
	ctx := b.Context()
	req := &automatorv1.ExecuteRequest{
		Account: "acme",
		Command: &automatorv1.Command{Script: "bench.sh"},
		Timeout: durationpb.New(time.Minute),
	}
	// Warm up both connections.
	if _, err := callerA.ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: "acme"}); err != nil {
		b.Fatal(err)
	}
	type answer struct {
		at   time.Time
		resp *automatorv1.PollResponse
		err  error
	}
	samples := make([]time.Duration, 0, b.N)
	submits := make([]time.Duration, 0, b.N) // Submit's own round trip, for scale
	b.ResetTimer()
	for range b.N {
		polled := make(chan answer, 1)
		go func() {
			resp, err := proxyB.Poll(ctx, &automatorv1.PollRequest{
				InstanceId: "bench", MaxUnits: 1, Wait: durationpb.New(10 * time.Second),
			})
			polled <- answer{time.Now(), resp, err}
		}()
		// Let the poll reach B and wait there, so what is measured is a
		// wake-up, not a poll that finds the unit already queued.
		b.StopTimer()
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
		queued := time.Now()
		if _, err := callerA.Submit(ctx, req); err != nil {
			b.Fatalf("Submit on A: %v", err)
		}
		submits = append(submits, time.Since(queued))
		a := <-polled
		if a.err != nil || len(a.resp.GetClaims()) != 1 {
			b.Fatalf("Poll on B: %d claims, %v; want the unit queued on A", len(a.resp.GetClaims()), a.err)
		}
		samples = append(samples, a.at.Sub(queued))
	}
	b.StopTimer()
	median, p99 := percentiles(samples)
	submitMedian, _ := percentiles(submits)
	b.ReportMetric(ms(median), "ms-median")
	b.ReportMetric(ms(p99), "ms-p99")
	b.ReportMetric(ms(submitMedian), "ms-submit-median")
	b.ReportMetric(0, "ns/op") // the loop includes deliberate pauses; the percentiles are the figures
	b.Logf("cross-replica wake-up over %d samples: median %v, p99 %v, max %v (Submit's own round trip: median %v)",
		len(samples), median, p99, slices.Max(samples), submitMedian)
}

// percentiles returns the median and the 99th percentile of d (sorted in
// place).
func percentiles(d []time.Duration) (median, p99 time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
