//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/opsgate/opsgate/internal/batch"
)

// The automator's store runs its writes in batches, one at a time
// (automator_store_batch* on /metrics). Read over a row's interval, they
// say how busy that one lane was and how many writes shared each commit.

// metricsOf maps each automator's name to its /metrics URL.
func metricsOf(as ...*automator) map[string]string {
	m := map[string]string{}
	for _, a := range as {
		m[a.name] = "http://" + a.httpAddr + "/metrics"
	}
	return m
}

// scrapeBatches reads the batch counters of each automator, by name and
// group; an automator whose /metrics cannot be read is left out.
func scrapeBatches(ctx context.Context, urls map[string]string) map[string]map[string]batch.Stats {
	out := map[string]map[string]batch.Stats{}
	for name, url := range urls {
		if s, err := scrapeBatchesOf(ctx, url); err == nil {
			out[name] = s
		}
	}
	return out
}

func scrapeBatchesOf(ctx context.Context, url string) (map[string]batch.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseBatches(resp.Body)
}

// parseBatches reads the automator_store_batch* counters from a /metrics
// page in the Prometheus text format, by group.
func parseBatches(r io.Reader) (map[string]batch.Stats, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := map[string]batch.Stats{}
	each := func(name string, set func(s *batch.Stats, v float64)) {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" {
					s := out[l.GetValue()]
					v := m.GetCounter().GetValue()
					if m.GetCounter() == nil {
						v = m.GetUntyped().GetValue() // a page without # TYPE lines
					}
					set(&s, v)
					out[l.GetValue()] = s
				}
			}
		}
	}
	each("automator_store_batches_total", func(s *batch.Stats, v float64) { s.Batches = int64(v) })
	each("automator_store_batch_calls_total", func(s *batch.Stats, v float64) { s.Items = int64(v) })
	each("automator_store_batch_busy_seconds_total", func(s *batch.Stats, v float64) { s.Busy = time.Duration(v * float64(time.Second)) })
	return out, nil
}

// batchesSince is after − before, for the automators and groups in both.
func batchesSince(before, after map[string]map[string]batch.Stats) map[string]map[string]batch.Stats {
	out := map[string]map[string]batch.Stats{}
	for name, groups := range after {
		for group, a := range groups {
			b, ok := before[name][group]
			if !ok {
				continue
			}
			if out[name] == nil {
				out[name] = map[string]batch.Stats{}
			}
			out[name][group] = batch.Stats{Batches: a.Batches - b.Batches, Items: a.Items - b.Items, Busy: a.Busy - b.Busy}
		}
	}
	return out
}

// describeBatches says, for each automator, how busy its store's write
// lane was over the interval and how many writes each batch held.
func describeBatches(res loopResult) string {
	if len(res.batches) == 0 || res.dur <= 0 {
		return "store write batches not read"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(res.batches)) {
		s, ok := res.batches[name]["write"]
		if !ok || s.Batches == 0 {
			continue
		}
		per := format(float64(s.Items)/float64(s.Batches), "")
		noun := "writes"
		if per == "1" {
			noun = "write"
		}
		parts = append(parts, fmt.Sprintf("%s busy %.0f %% of the time, %s %s per batch", name,
			100*s.Busy.Seconds()/res.dur.Seconds(), per, noun))
	}
	if len(parts) == 0 {
		return "no store write batches"
	}
	return "store writes (one batch at a time): " + strings.Join(parts, "; ")
}
