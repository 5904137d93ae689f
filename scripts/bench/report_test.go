//go:build linux

package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/batch"
)

// These test the arithmetic of the table only; nothing here measures or
// asserts a timing.

func TestMedianOfOddAndEvenCounts(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median(3,1,2) = %v, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4,1,3,2) = %v, want 2.5", got)
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {90, 90 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
}

func TestRatiosPairEachRunWithItsOwnBaseline(t *testing.T) {
	r := newResults()
	r.baseline("b", "base", "ops/s").add(1, 100).add(2, 200).add(3, 400)
	f := r.fig("f", "figure", "ops/s").add(1, 50).add(3, 100).add(2, 100).
		vs("b", goal{goalRatioAtLeast, 0.5}, "≥ 50 %")
	r.finish()
	if f.Median != 100 || f.Min != 50 || f.Max != 100 {
		t.Errorf("median %v (%v–%v), want 100 (50–100)", f.Median, f.Min, f.Max)
	}
	// Run by run: 50/100, 100/400, 100/200.
	if f.Ratio != 0.5 || len(f.Ratios) != 3 {
		t.Errorf("ratios %v, median %v; want three, median 0.5", f.Ratios, f.Ratio)
	}
	if f.Pass == nil || !*f.Pass {
		t.Errorf("a median ratio of 0.5 must pass ≥ 0.5")
	}
}

func TestAnExactGoalHoldsInEveryRunOrFails(t *testing.T) {
	r := newResults()
	ok := r.fig("ok", "ok", "").add(1, 1).add(2, 1).want(goal{goalEvery, 1}, "exactly 1")
	bad := r.fig("bad", "bad", "").add(1, 1).add(2, 2).add(3, 1).want(goal{goalEvery, 1}, "exactly 1")
	r.finish()
	if ok.Pass == nil || !*ok.Pass {
		t.Error("1 in every run must pass")
	}
	if bad.Pass == nil || *bad.Pass {
		t.Error("a run with 2 must fail, whatever the median")
	}
}

func TestTableNamesBaselinesMissesAndWhatIsNotMeasured(t *testing.T) {
	r := newResults()
	r.baseline("b", "raw thing", "ops/s").add(1, 1000)
	r.fig("slow", "slow thing", "ops/s").add(1, 100).vs("b", goal{goalRatioAtLeast, 0.2}, "≥ 20 %")
	r.fig("fast", "fast latency", "ms").add(1, 2).vs("b", goal{goalAtMost, 5}, "≤ 5 ms")
	r.fig("pg", "on PostgreSQL", "ops/s").vs("b", goal{goalRatioAtLeast, 0.8}, "≥ 80 %")
	r.finish()
	var out strings.Builder
	r.table(&out)
	for _, want := range []string{
		"| raw thing | 1,000 ops/s |", "| baseline |",
		"| slow thing | 100 ops/s | raw thing: 1,000 ops/s | 10.0 % | ≥ 20 % | **miss** |",
		"| fast latency | 2 ms |", "| pass |",
		"| on PostgreSQL | not measured |", "**not measured**",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFormatGroupsThousands(t *testing.T) {
	for v, want := range map[float64]string{1234567: "1,234,567 x", 999: "999 x", 12.34: "12.3 x", 1.234: "1.23 x", 3: "3 x"} {
		if got := format(v, "x"); got != want {
			t.Errorf("format(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestStoreBatchesAreReadFromMetricsAndSubtracted(t *testing.T) {
	page := func(batches, calls int, busy string) string {
		return `# HELP automator_store_batches_total Batches the store ran, by group.
# TYPE automator_store_batches_total counter
automator_store_batches_total{group="read"} 7
automator_store_batches_total{group="write"} ` + strconv.Itoa(batches) + `
automator_store_batch_calls_total{group="write"} ` + strconv.Itoa(calls) + `
automator_store_batch_busy_seconds_total{group="write"} ` + busy + `
automator_store_call_seconds_count{method="WorkGet"} 3
`
	}
	before, err := parseBatches(strings.NewReader(page(100, 1000, "1.5")))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseBatches(strings.NewReader(page(300, 3600, "4.7")))
	if err != nil {
		t.Fatal(err)
	}
	d := batchesSince(map[string]map[string]batch.Stats{"automator": before}, map[string]map[string]batch.Stats{"automator": after, "gone": after})
	if _, ok := d["gone"]; ok {
		t.Error("an automator read only after the interval has a difference")
	}
	w := d["automator"]["write"]
	if w.Batches != 200 || w.Items != 2600 || w.Busy != 3200*time.Millisecond {
		t.Errorf("write batches over the interval: %+v, want 200 batches, 2600 writes, 3.2 s busy", w)
	}
	if r := d["automator"]["read"]; r.Batches != 0 {
		t.Errorf("read batches over the interval: %+v, want 0", r)
	}
	got := describeBatches(loopResult{batches: d, dur: 4 * time.Second})
	if want := "automator busy 80 % of the time, 13 writes per batch"; !strings.Contains(got, want) {
		t.Errorf("describeBatches = %q, want it to say %q", got, want)
	}
}
