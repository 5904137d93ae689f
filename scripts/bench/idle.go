//go:build linux

package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/opsgate/opsgate/internal/ctxtime"
)

// idleSection: many idle instances, each on its own connection, long-poll
// one automator; the automator's RSS and CPU over windows of idleness.
func (b *bench) idleSection(ctx context.Context) error {
	a, err := b.startAutomator("automator-idle")
	if err != nil {
		return err
	}
	pr, err := b.createAccount(a.dir, "idle")
	if err != nil {
		return err
	}
	cc, api, err := a.caller()
	if err != nil {
		return err
	}
	defer cc.Close()
	pid := a.proc.pid()
	waitQuiet(ctx, pid, 5*time.Second)
	rss0, err := rssBytes(pid)
	if err != nil {
		return err
	}

	n := b.p.idle
	b.logf("idle: connecting %d instances", n)
	ictx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	log := &pollLog{}
	var dialErrs atomic.Int64
	since := time.Now()
	// At most 64 handshakes at a time; an instance counts as connected
	// once its connection is ready, and then polls until the end.
	sem := make(chan struct{}, 64)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		id := fmt.Sprintf("idle-%05d", i)
		wg.Go(func() {
			// Small client buffers: this program's memory is not measured,
			// and 10,000 connections of default buffers add up.
			conn, cl, err := proxyClient(a, pr.token, grpc.WithReadBufferSize(8<<10), grpc.WithWriteBufferSize(8<<10))
			if err != nil {
				dialErrs.Add(1)
				<-sem
				return
			}
			defer conn.Close()
			conn.Connect()
			readyCtx, done := context.WithTimeout(ictx, time.Minute)
			for s := conn.GetState(); s != connectivity.Ready && conn.WaitForStateChange(readyCtx, s); s = conn.GetState() {
			}
			done()
			<-sem
			poller(ictx, cl, id, 4, log)
		})
	}
	if err := waitInstances(ctx, api, "idle", n, since, 5*time.Minute, 2*time.Second); err != nil {
		return fmt.Errorf("idle: %w (dial errors %d, poll errors %d, last %v)", err, dialErrs.Load(), log.errs, log.lastErr)
	}
	ramp := time.Since(since)
	b.logf("idle: %d instances polling after %v", n, ramp.Round(time.Second))
	time.Sleep(min(5*time.Second, b.p.idleWindow))

	r := b.res
	rss := r.fig("idle_rss", fmt.Sprintf("%s idle instances: automator RSS (peak in window)", thousands(float64(n))), "MiB").
		want(goal{goalAtMost, 1024}, "≤ 1 GiB")
	perConn := r.fig("idle_rss_per_conn", "idle instances: automator RSS per connection", "KiB").
		want(goal{goalAtMost, 64}, "≤ 64 KiB")
	cpu := r.fig("idle_cpu", "idle instances: automator CPU", "%").
		want(goal{goalAtMost, 5}, "≤ 5 % of one core")
	base := r.fig("idle_rss_base", "automator RSS before any instance connected", "MiB")
	errs0 := log.errs
	for run := 1; run <= b.p.runs && ctx.Err() == nil; run++ {
		b.logf("idle run %d/%d: %v window", run, b.p.runs, b.p.idleWindow)
		peak, shares, err := idleWindow(ctx, pid, b.p.idleWindow)
		if err != nil {
			return err
		}
		share := shares["automator"]
		if run == b.p.runs {
			cpu.note("%s, last window", describeCPU(shares, "automator"))
		}
		rss.add(run, float64(peak)/(1<<20))
		perConn.add(run, float64(peak-rss0)/float64(n)/1024)
		cpu.add(run, share)
		base.add(run, float64(rss0)/(1<<20))
	}
	polls := log.len()
	rss.note("%d connections, each its own TLS connection with one long poll; ramp (connect, TLS, first poll) took %v; %d polls returned during the test (each instance re-polls when its window of 30–33 s ends)",
		n, ramp.Round(time.Second), polls)
	if log.errs > errs0 || dialErrs.Load() > 0 {
		r.notef("idle: %d dial errors, %d poll errors during the windows (last: %v)", dialErrs.Load(), log.errs-errs0, log.lastErr)
	}
	if b.profDir != "" && ctx.Err() == nil {
		b.profileIdle(ctx, a)
		// The runtime's memory statistics (stacks, heap, GC), as text.
		b.fetchProfile(ctx, a, "heap?debug=1", "automator-idle.memstats.txt", 30*time.Second)
	}
	return ctx.Err()
}

// idleWindow watches pid for d: its peak RSS and its CPU (and the
// machine's) in % of one core.
func idleWindow(ctx context.Context, pid int, d time.Duration) (peak int64, cpu map[string]float64, err error) {
	m := meterCPU(map[string]int{"automator": pid})
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		rss, err := rssBytes(pid)
		if err != nil {
			return 0, nil, err
		}
		peak = max(peak, rss)
		next := time.Now().Add(time.Second)
		if next.After(end) {
			next = end
		}
		if !ctxtime.Sleep(ctx, time.Until(next)) {
			return 0, nil, ctx.Err()
		}
	}
	return peak, m.read(), nil
}
