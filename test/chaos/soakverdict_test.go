package chaos

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The verdict on synthetic series: a run of 20 minutes sampled every 5 s,
// as `make soak` takes them.
const (
	synthSpan  = 20 * time.Minute
	synthEvery = 5 * time.Second
)

// synth samples f over a synthetic run.
func synth(f func(at time.Duration) float64) []SoakPoint {
	var ps []SoakPoint
	for at := time.Duration(0); at <= synthSpan; at += synthEvery {
		ps = append(ps, SoakPoint{At: at, Value: f(at)})
	}
	return ps
}

// noisy is base plus uniform noise of ±amp, rounded when whole is set (a
// count), from a fixed seed.
func noisy(seed uint64, base, amp float64, whole bool) func(time.Duration) float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	return func(time.Duration) float64 {
		v := base + (rng.Float64()*2-1)*amp
		if whole {
			v = math.Round(v)
		}
		return v
	}
}

// plus adds a growth of perMinute a minute to f.
func plus(f func(time.Duration) float64, perMinute float64) func(time.Duration) float64 {
	return func(at time.Duration) float64 { return f(at) + perMinute*at.Minutes() }
}

// sawtooth climbs from low to high over period and drops back, as the heap
// does between two collections.
func sawtooth(low, high float64, period time.Duration) func(time.Duration) float64 {
	return func(at time.Duration) float64 {
		phase := float64(at%period) / float64(period)
		return low + (high-low)*phase
	}
}

func automatorSeries(resource string, f func(time.Duration) float64) SoakSeries {
	return SoakSeries{Process: "automator", Role: RoleAutomator, Resource: resource, Points: synth(f)}
}

// flatAutomator is what a healthy automator shows: every resource flat with
// noise, the heap in use a garbage collector's sawtooth.
func flatAutomator() []SoakSeries {
	return []SoakSeries{
		automatorSeries(ResRSS, noisy(1, 75*mib, 4*mib, false)),
		automatorSeries(ResFDs, noisy(2, 28, 3, true)),
		automatorSeries(ResThreads, noisy(3, 9, 1, true)),
		automatorSeries(ResGoroutines, noisy(4, 52, 8, true)),
		automatorSeries(ResHeapInuse, sawtooth(4*mib, 68*mib, 2*time.Minute)),
		automatorSeries(ResHeapLive, noisy(5, 3.6*mib, 0.3*mib, false)),
	}
}

func verdict(series []SoakSeries) SoakReport {
	return SoakVerdict(series, SoakOptions{Allow: DefaultSoakAllowances(), Span: synthSpan})
}

// mustPass fails the test unless every series was judged and passed.
func mustPass(t *testing.T, r SoakReport) {
	t.Helper()
	if err := r.Err(); err != nil {
		t.Fatalf("the verdict failed a healthy run: %v\n%s", err, r.Table())
	}
	for _, f := range r.Findings {
		if !f.Judged {
			t.Errorf("%s %s was not judged", f.Process, f.Resource)
		}
	}
}

func TestSoakVerdictPassesFlatSeriesWithNoise(t *testing.T) {
	r := verdict(flatAutomator())
	mustPass(t, r)
	if len(r.Findings) != 6 {
		t.Fatalf("%d findings, want one per series (6)", len(r.Findings))
	}
}

// A slow, steady leak of each resource fails, naming the process, the
// resource, the figures and the allowance; the series that do not leak
// still pass beside it.
func TestSoakVerdictFailsASlowSteadyLeak(t *testing.T) {
	for _, c := range []struct {
		resource  string
		perMinute float64
		want      []string // in the failure's words
	}{
		// One open file every minute: 10 more over the half run that
		// separates the quarters compared, past the 6 allowed.
		{ResFDs, 1, []string{"automator open_fds grew from", "allowed +6"}},
		// One goroutine every 40 s.
		{ResGoroutines, 1.5, []string{"automator goroutines grew from", "allowed +12"}},
		{ResThreads, 0.6, []string{"automator threads grew from", "allowed +4"}},
		// 1.5 MiB a minute of live heap, under a noise of ±0.3 MiB.
		{ResHeapLive, 1.5 * mib, []string{"automator heap_live_bytes grew from", "MiB"}},
		// 8 MiB a minute of resident memory: 80 MiB over the half run.
		{ResRSS, 8 * mib, []string{"automator rss_bytes grew from", "allowed +"}},
	} {
		t.Run(c.resource, func(t *testing.T) {
			series := flatAutomator()
			for i := range series {
				if series[i].Resource == c.resource {
					f := noisy(uint64(i)+10, series[i].Points[0].Value, 0.05*series[i].Points[0].Value, c.resource == ResFDs || c.resource == ResGoroutines || c.resource == ResThreads)
					series[i].Points = synth(plus(f, c.perMinute))
				}
			}
			r := verdict(series)
			failed := r.Failed()
			if r.Pass() || len(failed) != 1 || failed[0].Resource != c.resource || failed[0].Process != "automator" {
				t.Fatalf("a leak of %v a minute of %s: failed %+v, want that one series failed\n%s", c.perMinute, c.resource, failed, r.Table())
			}
			msg := r.Err().Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the failure %q does not say %q", msg, w)
				}
			}
			if f := failed[0]; f.Growth <= f.Allowed || !strings.Contains(r.Table(), "**FAIL**") {
				t.Errorf("growth %v, allowed %v; the table must show the failure:\n%s", f.Growth, f.Allowed, r.Table())
			}
		})
	}
}

// The heap in use climbs by the collector's headroom and drops at each
// collection, and resident memory follows with a slower sawtooth of its
// own; whatever their periods and phases against the quarters, they pass.
func TestSoakVerdictPassesAGCSawtooth(t *testing.T) {
	for _, period := range []time.Duration{30 * time.Second, 110 * time.Second, 2 * time.Minute, 170 * time.Second} {
		for shift := time.Duration(0); shift < period; shift += period / 7 {
			series := flatAutomator()
			rss, heap := sawtooth(60*mib, 135*mib, period+17*time.Second), sawtooth(4*mib, 68*mib, period)
			series[0] = automatorSeries(ResRSS, func(at time.Duration) float64 { return rss(at + shift) })
			series[4] = automatorSeries(ResHeapInuse, func(at time.Duration) float64 { return heap(at + shift) })
			r := verdict(series)
			if err := r.Err(); err != nil {
				t.Errorf("a sawtooth of period %v shifted by %v failed: %v\n%s", period, shift, err, r.Table())
			}
		}
	}
}

// A sawtooth whose floor climbs is a leak under the collector's noise: it
// fails.
func TestSoakVerdictFailsASawtoothWhoseFloorClimbs(t *testing.T) {
	series := flatAutomator()
	series[4] = automatorSeries(ResHeapInuse, plus(sawtooth(4*mib, 68*mib, 2*time.Minute), 10*mib))
	r := verdict(series)
	if failed := r.Failed(); len(failed) != 1 || failed[0].Resource != ResHeapInuse {
		t.Fatalf("failed %+v, want heap_inuse_bytes alone\n%s", failed, r.Table())
	}
}

// What grows in the first quarter (the warm-up: caches, pools, the first
// connections) and then stays is no leak.
func TestSoakVerdictIgnoresTheWarmUp(t *testing.T) {
	series := flatAutomator()
	base := noisy(7, 40, 4, true)
	series[3] = automatorSeries(ResGoroutines, func(at time.Duration) float64 {
		return base(at) + min(at.Minutes(), 4)*10 // +40 in the first 4 minutes
	})
	mustPass(t, verdict(series))
}

// The database keeps every unit, so it grows with them: it passes while the
// bytes per unit stay, even when the units come faster late in the run, and
// fails when each unit costs more late than early.
func TestSoakVerdictJudgesTheDatabasePerUnit(t *testing.T) {
	// 40 units a second, 60 in the second half.
	unitsAt := func(at time.Duration) float64 {
		s := at.Seconds()
		if s <= synthSpan.Seconds()/2 {
			return 40 * s
		}
		return 40*synthSpan.Seconds()/2 + 60*(s-synthSpan.Seconds()/2)
	}
	units := synth(unitsAt)
	db := func(perUnit func(time.Duration) float64) []SoakSeries {
		var bytes float64
		last := 0.0
		f := func(at time.Duration) float64 {
			u := unitsAt(at)
			bytes += (u - last) * perUnit(at)
			last = u
			return 128<<10 + math.Floor(bytes/4096)*4096 // whole pages
		}
		return []SoakSeries{{Process: "database", Role: RoleDatabase, Resource: ResDBBytes, Points: synth(f)}}
	}
	opts := SoakOptions{Allow: DefaultSoakAllowances(), Span: synthSpan, Units: units}

	steady := SoakVerdict(db(func(time.Duration) float64 { return 1060 }), opts)
	if err := steady.Err(); err != nil {
		t.Errorf("1060 bytes a unit throughout: %v\n%s", err, steady.Table())
	}
	if f := steady.Findings[0]; !f.PerUnit || math.Abs(f.Early-1060) > 20 || math.Abs(f.Late-1060) > 20 {
		t.Errorf("per unit: early %.0f, late %.0f, want about 1060 each", f.Early, f.Late)
	}

	costlier := SoakVerdict(db(func(at time.Duration) float64 { return 1060 + 100*at.Minutes() }), opts)
	err := costlier.Err()
	if err == nil {
		t.Fatalf("bytes per unit growing from 1060 to 3060: passed\n%s", costlier.Table())
	}
	if !strings.Contains(err.Error(), "database db_bytes grew from") || !strings.Contains(err.Error(), "B/unit") {
		t.Errorf("the failure does not name the database's growth per unit: %v", err)
	}

	none := SoakVerdict(db(func(time.Duration) float64 { return 1060 }), SoakOptions{Allow: DefaultSoakAllowances(), Span: synthSpan})
	if err := none.Err(); err == nil || !strings.Contains(err.Error(), "cannot be judged per unit") {
		t.Errorf("without the units ended: %v, want it cannot be judged", err)
	}
}

// A series too short to judge fails (a run that sampled nothing late must
// not pass for want of readings); a series with no allowance is shown and
// never fails.
func TestSoakVerdictFailsWhatItCannotJudge(t *testing.T) {
	short := automatorSeries(ResFDs, noisy(8, 28, 0, true))
	short.Points = short.Points[:len(short.Points)/2] // none in the last quarter
	unjudged := SoakSeries{Process: "automator", Role: RoleAutomator, Resource: "something_else", Points: synth(plus(noisy(9, 1, 0, false), 1000))}
	r := verdict([]SoakSeries{short, unjudged})
	err := r.Err()
	if err == nil || !strings.Contains(err.Error(), "automator open_fds: too few readings to judge") {
		t.Fatalf("a series with no reading in the last quarter: %v, want too few readings", err)
	}
	if f := r.Findings[1]; f.Judged || !f.Pass || f.Growth < 10000 {
		t.Errorf("the series without an allowance: %+v, want shown, not judged, its growth given", f)
	}
}

func TestSoakParsesPrometheusSamplesWithAndWithoutLabels(t *testing.T) {
	page := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 52
go_memstats_next_gc_bytes 7.0778880e+07
go_gc_gogc_percent 1751
automator_work_finished_total{account="acme",state="succeeded"} 5834
automator_work_finished_total{account="a b",state="timed_out"} 474 1700000000000
malformed line
`
	m, err := ParsePromText(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if m["go_goroutines"] != 52 {
		t.Errorf("go_goroutines = %v, want 52", m["go_goroutines"])
	}
	if sum, ok := PromSum(m, "automator_work_finished_total"); !ok || sum != 5834+474 {
		t.Errorf("the units finished sum to %v (%v), want %d", sum, ok, 5834+474)
	}
	if live, ok := PromHeapLive(m); !ok || math.Abs(live-7.077888e7*100/1851) > 1 {
		t.Errorf("live heap %v (%v), want the goal over 1 + GOGC/100", live, ok)
	}
}
