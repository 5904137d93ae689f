//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

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
	out := map[string]batch.Stats{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, `{group="`)
		if !ok || !strings.HasPrefix(name, "automator_store_batch") {
			continue
		}
		group, rest, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s := out[group]
		switch name {
		case "automator_store_batches_total":
			s.Batches = int64(v)
		case "automator_store_batch_calls_total":
			s.Items = int64(v)
		case "automator_store_batch_busy_seconds_total":
			s.Busy = time.Duration(v * float64(time.Second))
		}
		out[group] = s
	}
	return out, sc.Err()
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
