package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The soak (`make soak`, TestSoak) runs a real automator and real proxies
// under a steady, mild load for a long time, samples what each process
// holds, and judges whether anything grows: a leak hides in what is done
// again and again (reconnects, ended units), and shows only over minutes.
// This file holds the parts that are not tied to a run: the samples, the
// verdict on them (SoakVerdict), the summary table and the parsing of a
// Prometheus text page. The sampler that reads /proc is soaksample_linux.go;
// the run itself is soak_test.go.

// Roles of the processes a soak samples. Allowances are per role and
// resource: a proxy holds less than the automator, and its garbage
// collector runs on another rhythm.
const (
	RoleAutomator = "automator"
	RoleProxy     = "proxy"
	// RoleReaper is a proxy's reaper: the small process of the proxy's own
	// binary that kills its scripts if the proxy dies.
	RoleReaper = "reaper"
	// RoleDatabase is the automator's SQLite files, not a process.
	RoleDatabase = "database"
)

// Resources a soak samples.
const (
	ResRSS        = "rss_bytes"        // resident memory, /proc/PID/status VmRSS
	ResFDs        = "open_fds"         // entries of /proc/PID/fd
	ResThreads    = "threads"          // /proc/PID/status Threads
	ResGoroutines = "goroutines"       // go_goroutines of /metrics
	ResHeapInuse  = "heap_inuse_bytes" // go_memstats_heap_inuse_bytes of /metrics
	// ResHeapLive is the heap the last collection found live, computed from
	// /metrics as the heap goal over (1 + GOGC/100): it moves only at each
	// collection, so it shows a leak without the sawtooth of heap in use.
	ResHeapLive = "heap_live_bytes"
	ResDBBytes  = "db_bytes"  // the database file
	ResWALBytes = "wal_bytes" // its write-ahead log
	// ResUnitsEnded counts the units the automator ended (the sum of
	// automator_work_finished_total): the load's progress, not judged.
	ResUnitsEnded = "units_ended"
)

// SoakPoint is one reading, At after the run's start.
type SoakPoint struct {
	At    time.Duration
	Value float64
}

// SoakSeries is the readings of one resource of one process.
type SoakSeries struct {
	Process  string // "automator", "p1", "p1 reaper", "database"
	Role     string
	Resource string
	Points   []SoakPoint
	// PIDs are the processes read, in order: more than one means the
	// process was replaced during the run (a reaper started again).
	PIDs []int
}

// SoakAllowance is how much a resource may grow from the early part of a
// run to the late part and still pass: Abs, or Rel of its early value,
// whichever is larger. With PerUnit the growth compared is that per unit
// ended, in each part (a database that keeps every unit grows with them;
// what must not grow is what each unit costs).
type SoakAllowance struct {
	Abs     float64
	Rel     float64
	PerUnit bool
}

// SoakOptions are the verdict's settings.
type SoakOptions struct {
	// Allow holds the allowance of each role and resource, keyed
	// "role/resource" (SoakKey). A series with none is shown, not judged.
	Allow map[string]SoakAllowance
	// Span is the run's length, which the quarters divide; zero: the
	// latest reading of any series.
	Span time.Duration
	// Units are the units ended over the run, for PerUnit allowances.
	Units []SoakPoint
	// MinPoints is the fewest readings each compared quarter must hold
	// (3 when zero).
	MinPoints int
}

// SoakKey is the key of an allowance.
func SoakKey(role, resource string) string { return role + "/" + resource }

const mib = 1 << 20

// DefaultSoakAllowances are the allowances of `make soak`, with the reason
// for each (docs/failure-semantics.md, "The soak", says the same):
//
//   - goroutines, open files and threads are counts that a process with a
//     steady load holds steady: a few come and go with the polls and calls
//     in flight at the moment of a reading, and the medians absorb most of
//     that; the allowances are a little over what the quiet runs showed.
//     Threads only ever grow in a Go process (the runtime keeps them), so
//     a burst of blocking system calls may add one or two for good.
//   - resident memory is noisy: the garbage collector lets the heap grow
//     by 64 MiB in the automator (internal/gctune) and by as much as is
//     live in a proxy before it collects, and returns freed pages to the
//     system minutes later. So it has an absolute floor of about one
//     collection cycle and a relative allowance.
//   - the live heap after a collection moves only with what is kept, so its
//     allowance is tighter than the heap in use, whose sawtooth is the
//     collector's headroom.
//   - the database keeps every ended unit (work_retention unset, and never
//     under 24 h), so its file grows with the units; what is judged is the
//     bytes added per unit ended, late against early. The WAL is reused
//     after each checkpoint and must stay about the size it reached.
func DefaultSoakAllowances() map[string]SoakAllowance {
	return map[string]SoakAllowance{
		SoakKey(RoleAutomator, ResGoroutines): {Abs: 12},
		SoakKey(RoleAutomator, ResFDs):        {Abs: 6},
		SoakKey(RoleAutomator, ResThreads):    {Abs: 4},
		SoakKey(RoleAutomator, ResRSS):        {Abs: 48 * mib, Rel: 0.2},
		SoakKey(RoleAutomator, ResHeapLive):   {Abs: 8 * mib, Rel: 0.25},
		SoakKey(RoleAutomator, ResHeapInuse):  {Abs: 64 * mib, Rel: 0.25},
		SoakKey(RoleProxy, ResFDs):            {Abs: 5},
		SoakKey(RoleProxy, ResThreads):        {Abs: 4},
		SoakKey(RoleProxy, ResRSS):            {Abs: 8 * mib, Rel: 0.2},
		SoakKey(RoleReaper, ResFDs):           {Abs: 3},
		SoakKey(RoleReaper, ResThreads):       {Abs: 3},
		SoakKey(RoleReaper, ResRSS):           {Abs: 4 * mib, Rel: 0.2},
		SoakKey(RoleDatabase, ResDBBytes):     {Abs: 256, Rel: 0.25, PerUnit: true},
		SoakKey(RoleDatabase, ResWALBytes):    {Abs: 8 * mib, Rel: 0.5},
	}
}

// SoakFinding is the verdict on one series: its figures, and whether it
// passed when it was judged.
type SoakFinding struct {
	Process, Role, Resource string
	Judged                  bool
	Pass                    bool
	Start, End, Peak        float64
	// Early and Late are the medians of the second and the last quarter
	// of the run (per unit ended, for a PerUnit allowance); Growth is
	// Late - Early, Allowed what the allowance let it grow.
	Early, Late, Growth, Allowed float64
	PerUnit                      bool
	// Detail says why a judged series failed, in a sentence that names
	// the process, the resource, the figures and the allowance.
	Detail string
	PIDs   []int
}

// SoakReport is the verdict on a run's samples.
type SoakReport struct {
	Findings []SoakFinding
	// EarlyFrom..EarlyTo and LateFrom..LateTo are the parts compared.
	EarlyFrom, EarlyTo, LateFrom, LateTo time.Duration
}

// Pass reports whether every judged series passed.
func (r SoakReport) Pass() bool {
	for _, f := range r.Findings {
		if f.Judged && !f.Pass {
			return false
		}
	}
	return true
}

// Failed returns the judged series that failed.
func (r SoakReport) Failed() []SoakFinding {
	var out []SoakFinding
	for _, f := range r.Findings {
		if f.Judged && !f.Pass {
			out = append(out, f)
		}
	}
	return out
}

// Err is nil when the report passes, and otherwise names each resource
// that grew, of which process, by how much against what allowance.
func (r SoakReport) Err() error {
	failed := r.Failed()
	if len(failed) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GROWTH: %d of the sampled resources grew past their allowance", len(failed))
	for _, f := range failed {
		fmt.Fprintf(&b, "\n  %s", f.Detail)
	}
	return errors.New(b.String())
}

// SoakVerdict judges a run's samples. The first quarter of the run is its
// warm-up (caches filling, pools and connections opening, the collector
// finding its pace) and is ignored; the median of the last quarter is
// compared with the median of the second, so a steady leak shows as the
// growth over half the run, while noise and a garbage collector's sawtooth,
// much shorter than a quarter, fall out of both medians alike. A series
// whose growth exceeds its allowance fails; so does a judged series with
// fewer than MinPoints readings in either quarter, which cannot be judged.
// It is a pure function of its arguments.
func SoakVerdict(series []SoakSeries, o SoakOptions) SoakReport {
	if o.MinPoints <= 0 {
		o.MinPoints = 3
	}
	span := o.Span
	if span <= 0 {
		for _, s := range series {
			for _, p := range s.Points {
				span = max(span, p.At)
			}
		}
	}
	r := SoakReport{EarlyFrom: span / 4, EarlyTo: span / 2, LateFrom: span * 3 / 4, LateTo: span}
	for _, s := range series {
		f := SoakFinding{Process: s.Process, Role: s.Role, Resource: s.Resource, PIDs: s.PIDs, Pass: true}
		if len(s.Points) > 0 {
			f.Start, f.End, f.Peak = s.Points[0].Value, s.Points[len(s.Points)-1].Value, s.Points[0].Value
			for _, p := range s.Points {
				f.Peak = max(f.Peak, p.Value)
			}
		}
		early, late := within(s.Points, r.EarlyFrom, r.EarlyTo), within(s.Points, r.LateFrom, r.LateTo+1)
		a, judged := o.Allow[SoakKey(s.Role, s.Resource)]
		f.Judged, f.PerUnit = judged, a.PerUnit
		name := fmt.Sprintf("%s %s", s.Process, s.Resource)
		switch {
		case len(early) < o.MinPoints || len(late) < o.MinPoints:
			f.Early, f.Late = median(early), median(late)
			if judged {
				f.Pass = false
				f.Detail = fmt.Sprintf("%s: too few readings to judge: %d in %v–%v and %d in %v–%v, need %d in each",
					name, len(early), r.EarlyFrom, r.EarlyTo, len(late), r.LateFrom, r.LateTo, o.MinPoints)
			}
			r.Findings = append(r.Findings, f)
			continue
		case a.PerUnit:
			var okE, okL bool
			f.Early, okE = perUnit(early, o.Units)
			f.Late, okL = perUnit(late, o.Units)
			if !okE || !okL {
				f.Pass = false
				f.Detail = fmt.Sprintf("%s: cannot be judged per unit: no unit ended in %v–%v or in %v–%v", name, r.EarlyFrom, r.EarlyTo, r.LateFrom, r.LateTo)
				r.Findings = append(r.Findings, f)
				continue
			}
		default:
			f.Early, f.Late = median(early), median(late)
		}
		f.Growth = f.Late - f.Early
		if !judged {
			r.Findings = append(r.Findings, f)
			continue
		}
		f.Allowed = max(a.Abs, a.Rel*math.Abs(f.Early))
		f.Pass = f.Growth <= f.Allowed
		if !f.Pass {
			what := "median"
			if a.PerUnit {
				what = "growth per unit ended"
			}
			f.Detail = fmt.Sprintf("%s grew from %s (%s of %v–%v) to %s (%s of %v–%v): %s, allowed %s (%s, or %.0f%% of the early %s)",
				name, FormatSoakValue(s.Resource, f.Early, a.PerUnit), what, r.EarlyFrom.Round(time.Second), r.EarlyTo.Round(time.Second),
				FormatSoakValue(s.Resource, f.Late, a.PerUnit), what, r.LateFrom.Round(time.Second), r.LateTo.Round(time.Second),
				signed(FormatSoakValue(s.Resource, f.Growth, a.PerUnit)), signed(FormatSoakValue(s.Resource, f.Allowed, a.PerUnit)),
				FormatSoakValue(s.Resource, a.Abs, a.PerUnit), a.Rel*100, what)
		}
		r.Findings = append(r.Findings, f)
	}
	return r
}

// within returns the points with from <= At < to.
func within(ps []SoakPoint, from, to time.Duration) []SoakPoint {
	var out []SoakPoint
	for _, p := range ps {
		if p.At >= from && p.At < to {
			out = append(out, p)
		}
	}
	return out
}

func median(ps []SoakPoint) float64 {
	if len(ps) == 0 {
		return 0
	}
	vs := make([]float64, len(ps))
	for i, p := range ps {
		vs[i] = p.Value
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// perUnit is how much ps grew from its first reading to its last, per unit
// ended in between (units read at or before each reading).
func perUnit(ps []SoakPoint, units []SoakPoint) (float64, bool) {
	first, last := ps[0], ps[len(ps)-1]
	u0, ok0 := valueAt(units, first.At)
	u1, ok1 := valueAt(units, last.At)
	if !ok0 || !ok1 || u1 <= u0 {
		return 0, false
	}
	return (last.Value - first.Value) / (u1 - u0), true
}

// valueAt is the latest reading at or before at.
func valueAt(ps []SoakPoint, at time.Duration) (float64, bool) {
	v, ok := 0.0, false
	for _, p := range ps {
		if p.At > at {
			break
		}
		v, ok = p.Value, true
	}
	return v, ok
}

func signed(s string) string {
	if strings.HasPrefix(s, "-") {
		return s
	}
	return "+" + s
}

// FormatSoakValue renders a reading of resource: bytes in MiB (or bytes
// per unit), counts as integers.
func FormatSoakValue(resource string, v float64, perUnit bool) string {
	switch {
	case perUnit:
		return fmt.Sprintf("%.0f B/unit", v)
	case strings.HasSuffix(resource, "_bytes"):
		return fmt.Sprintf("%.1f MiB", v/mib)
	case math.Abs(v-math.Round(v)) < 1e-9:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

// Table renders the report as the table `make soak` prints: per process and
// resource, the first, last and highest readings, the medians compared,
// the growth, its allowance and the verdict.
func (r SoakReport) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| process | resource | start | end | peak | early (%v–%v) | late (%v–%v) | growth | allowed | result |\n",
		r.EarlyFrom.Round(time.Second), r.EarlyTo.Round(time.Second), r.LateFrom.Round(time.Second), r.LateTo.Round(time.Second))
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, f := range r.Findings {
		v := func(x float64) string { return FormatSoakValue(f.Resource, x, false) }
		u := func(x float64) string { return FormatSoakValue(f.Resource, x, f.PerUnit) }
		result, allowed := "shown", ""
		if f.Judged {
			result, allowed = "PASS", "≤ "+signed(u(f.Allowed))
			if !f.Pass {
				result = "**FAIL**"
			}
		}
		proc := f.Process
		if len(f.PIDs) > 1 {
			proc = fmt.Sprintf("%s (%d processes)", f.Process, len(f.PIDs))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			proc, f.Resource, v(f.Start), v(f.End), v(f.Peak), u(f.Early), u(f.Late), signed(u(f.Growth)), allowed, result)
	}
	return b.String()
}

// ParsePromText reads a Prometheus text exposition: each sample's value by
// its name with its labels as written ("go_goroutines",
// `automator_work_finished_total{account="a",state="succeeded"}`).
// Comments and lines that do not parse are skipped.
func ParsePromText(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// The value follows the name (and labels, which may hold spaces
		// inside quotes): it is the first field after the closing brace,
		// or after the name.
		rest := line
		name := ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, rest = line[:j+1], line[j+1:]
		} else {
			n, r, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			name, rest = n, r
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[name] = v
	}
	return out, sc.Err()
}

// PromSum sums the samples of the metric named name, whatever their labels.
func PromSum(m map[string]float64, name string) (float64, bool) {
	sum, found := 0.0, false
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
			found = true
		}
	}
	return sum, found
}

// PromHeapLive is the heap the last collection found live, from a Go
// program's default metrics: the heap goal is that times (1 + GOGC/100).
func PromHeapLive(m map[string]float64) (float64, bool) {
	goal, ok1 := m["go_memstats_next_gc_bytes"]
	gogc, ok2 := m["go_gc_gogc_percent"]
	if !ok1 || !ok2 || gogc < 0 {
		return 0, false
	}
	return goal * 100 / (100 + gogc), true
}
