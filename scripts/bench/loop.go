//go:build linux

package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsgate/opsgate/internal/batch"
	"github.com/opsgate/opsgate/internal/ctxtime"
)

// loopResult is what a closed loop of callers achieved in its measured
// interval.
type loopResult struct {
	done     int64   // calls completed within the interval
	errs     int64   // failed calls (whole run)
	firstErr error   // the first failure, for the log
	rate     float64 // done per second
	// lat holds the durations of the calls completed within the interval.
	lat []time.Duration
	// cpu is each metered process's CPU over the interval, % of one core.
	cpu map[string]float64
	// batches is each watched automator's store batches over the interval
	// (missing when its /metrics could not be read).
	batches map[string]map[string]batch.Stats
	dur     time.Duration // the interval
}

// watch names what closedLoop meters over its counted interval: the CPU
// of processes, by name, and the store batches of automators, by name
// (their /metrics URL).
type watch struct {
	pids    map[string]int
	metrics map[string]string
}

// closedLoop runs n callers, each calling call back to back, for warm and
// then dur; the calls that complete within dur are counted. Callers start
// no new call after the interval and the loop waits for those in flight,
// so nothing is left queued. w names what is metered over the interval.
func closedLoop(ctx context.Context, n int, warm, dur time.Duration, w watch, call func(context.Context) error) loopResult {
	start := time.Now()
	mStart, mEnd := start.Add(warm), start.Add(warm+dur)
	var res loopResult
	var done, errs atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var lat []time.Duration
			defer func() {
				mu.Lock()
				res.lat = append(res.lat, lat...)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(mEnd) {
					return
				}
				err := call(ctx)
				t1 := time.Now()
				if err != nil {
					if errs.Add(1) == 1 {
						mu.Lock()
						res.firstErr = err
						mu.Unlock()
					}
					time.Sleep(10 * time.Millisecond) // no busy loop on a broken target
					continue
				}
				if t1.After(mStart) && !t1.After(mEnd) {
					done.Add(1)
					lat = append(lat, t1.Sub(t0))
				}
			}
		})
	}
	// Meter CPU and batches over exactly the measured interval.
	metered := make(chan struct{})
	go func() {
		defer close(metered)
		if !ctxtime.Sleep(ctx, time.Until(mStart)) {
			return
		}
		m := meterCPU(w.pids)
		b0 := scrapeBatches(ctx, w.metrics)
		if !ctxtime.Sleep(ctx, time.Until(mEnd)) {
			return
		}
		res.cpu = m.read()
		res.batches = batchesSince(b0, scrapeBatches(ctx, w.metrics))
	}()
	wg.Wait()
	<-metered
	res.dur = dur
	res.done, res.errs = done.Load(), errs.Load()
	res.rate = float64(res.done) / dur.Seconds()
	return res
}
