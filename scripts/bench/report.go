//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// figure is one row of the table: one value per run, compared with a
// baseline measured in the same runs and checked against a target.
type figure struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Runs and Values go together: Values[i] was measured in run Runs[i]
	// (a run that failed leaves no value).
	Runs   []int     `json:"runs"`
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	// IsBaseline marks the raw measurements the other figures are
	// compared with.
	IsBaseline bool `json:"is_baseline,omitempty"`
	// WhatIf marks a measurement of a design the product does not have
	// (yet): what a change would move a figure to.
	WhatIf bool `json:"what_if,omitempty"`
	// Baseline is the key of the figure this one is divided by, run by run.
	Baseline string    `json:"baseline,omitempty"`
	Ratios   []float64 `json:"ratios,omitempty"`
	Ratio    float64   `json:"ratio,omitempty"` // median of Ratios
	Target   string    `json:"target,omitempty"`
	Pass     *bool     `json:"pass,omitempty"`
	// Detail says what else was seen (CPU shares, errors, sample counts).
	Detail string `json:"detail,omitempty"`

	goal goal
}

// goal is what a figure must reach; the zero goal is none (informational).
type goal struct {
	kind  goalKind
	value float64
}

type goalKind int

const (
	goalNone goalKind = iota
	// goalRatioAtLeast: median(value/baseline) >= value (a fraction).
	goalRatioAtLeast
	// goalRatioAtMost: median(value/baseline) <= value (a multiple).
	goalRatioAtMost
	// goalAtMost: the median value <= value.
	goalAtMost
	// goalEvery: every run's value == value (exactness, not a median).
	goalEvery
)

// results holds the figures in the order they are first named.
type results struct {
	figs  []*figure
	byKey map[string]*figure
	notes []string
}

func newResults() *results { return &results{byKey: make(map[string]*figure)} }

// fig returns the figure named key, making it on first use.
func (r *results) fig(key, name, unit string) *figure {
	if f, ok := r.byKey[key]; ok {
		return f
	}
	f := &figure{Key: key, Name: name, Unit: unit}
	r.figs = append(r.figs, f)
	r.byKey[key] = f
	return f
}

// baseline names a raw measurement.
func (r *results) baseline(key, name, unit string) *figure {
	f := r.fig(key, name, unit)
	f.IsBaseline = true
	return f
}

// add records one run's value.
func (f *figure) add(run int, v float64) *figure {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return f
	}
	f.Runs = append(f.Runs, run)
	f.Values = append(f.Values, v)
	return f
}

// vs compares f with a baseline under a goal, described by text.
func (f *figure) vs(baseline string, g goal, text string) *figure {
	f.Baseline, f.goal, f.Target = baseline, g, text
	return f
}

// want sets a goal that needs no baseline.
func (f *figure) want(g goal, text string) *figure {
	f.goal, f.Target = g, text
	return f
}

// note appends to the figure's detail.
func (f *figure) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if f.Detail == "" {
		f.Detail = s
	} else {
		f.Detail += "; " + s
	}
}

func (r *results) notef(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// finish computes medians, ratios and verdicts.
func (r *results) finish() {
	for _, f := range r.figs {
		if len(f.Values) == 0 {
			continue
		}
		f.Median, f.Min, f.Max = median(f.Values), slices.Min(f.Values), slices.Max(f.Values)
		if b := r.byKey[f.Baseline]; b != nil {
			f.Ratios = nil
			for i, run := range f.Runs {
				if j := slices.Index(b.Runs, run); j >= 0 && b.Values[j] != 0 {
					f.Ratios = append(f.Ratios, f.Values[i]/b.Values[j])
				}
			}
			if len(f.Ratios) > 0 {
				f.Ratio = median(f.Ratios)
			}
		}
		var pass bool
		switch f.goal.kind {
		case goalNone:
			continue
		case goalRatioAtLeast:
			if len(f.Ratios) == 0 {
				continue
			}
			pass = f.Ratio >= f.goal.value
		case goalRatioAtMost:
			if len(f.Ratios) == 0 {
				continue
			}
			pass = f.Ratio <= f.goal.value
		case goalAtMost:
			pass = f.Median <= f.goal.value
		case goalEvery:
			pass = f.Min == f.goal.value && f.Max == f.goal.value
		}
		f.Pass = &pass
	}
}

// median of a non-empty slice (the mean of the middle two for even lengths).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile of durations by nearest rank, p in [0, 100].
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// format renders a value in its unit.
func format(v float64, unit string) string {
	var n string
	switch {
	case unit == "%":
		n = fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1000:
		n = thousands(v)
	case math.Abs(v) >= 100 || v == math.Trunc(v):
		n = fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		n = fmt.Sprintf("%.1f", v)
	default:
		n = fmt.Sprintf("%.2f", v)
	}
	if unit == "" {
		return n
	}
	if unit == "%" {
		return n + " %"
	}
	return n + " " + unit
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (f *figure) valueCell() string {
	if len(f.Values) == 0 {
		return "not measured"
	}
	cell := format(f.Median, f.Unit)
	if len(f.Values) > 1 {
		cell += fmt.Sprintf(" (%s–%s)", format(f.Min, ""), format(f.Max, ""))
	}
	return cell
}

func (f *figure) medianCell() string {
	if len(f.Values) == 0 {
		return "not measured"
	}
	return format(f.Median, f.Unit)
}

func (f *figure) ratioCell() string {
	if f.Baseline == "" || len(f.Ratios) == 0 {
		return ""
	}
	if f.goal.kind == goalRatioAtLeast && f.goal.value < 1 {
		return fmt.Sprintf("%.1f %%", 100*f.Ratio)
	}
	return fmt.Sprintf("%.2f×", f.Ratio)
}

func (f *figure) resultCell() string {
	switch {
	case f.IsBaseline:
		return "baseline"
	case f.WhatIf:
		return "what-if"
	case f.Pass == nil && f.Target != "" && len(f.Values) == 0:
		return "**not measured**"
	case f.Pass == nil:
		return ""
	case *f.Pass:
		return "pass"
	}
	return "**miss**"
}

// table writes the markdown table.
func (r *results) table(w io.Writer) {
	fmt.Fprintln(w, "| figure | median of runs (min–max) | baseline (median, same runs) | ratio | target | result |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, f := range r.figs {
		base := ""
		if b := r.byKey[f.Baseline]; b != nil {
			base = fmt.Sprintf("%s: %s", b.Name, b.medianCell())
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n",
			cell(f.Name), cell(f.valueCell()), cell(base), f.ratioCell(), cell(f.Target), f.resultCell())
	}
}

// details writes what the table has no room for.
func (r *results) details(w io.Writer) {
	for _, f := range r.figs {
		if f.Detail != "" {
			fmt.Fprintf(w, "- %s: %s\n", f.Name, f.Detail)
		}
	}
	for _, n := range r.notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// report is bench-results.json.
type report struct {
	Started  time.Time         `json:"started"`
	Finished time.Time         `json:"finished"`
	Command  string            `json:"command"`
	Runs     int               `json:"runs"`
	Host     map[string]string `json:"host"`
	Figures  []*figure         `json:"figures"`
	Notes    []string          `json:"notes,omitempty"`
	Profiles []string          `json:"profiles,omitempty"`
}

func writeJSON(path string, rep report) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
