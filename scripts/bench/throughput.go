//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// pingCallers are the concurrencies of the @ping throughput test.
var pingCallers = []int{1, 16, 64, 256}

// instanceConcurrency is each proxy instance's max_concurrency: the two
// instances' 128 slots exceed 64 callers, so up to 64 callers the queue,
// not the instances, is what is measured (256 callers keep every slot busy).
const instanceConcurrency = 64

// mainSection is the automator on durable SQLite with two proxy instances:
// baselines, @ping throughput, latency and script throughput, run after run.
func (b *bench) mainSection(ctx context.Context) error {
	name := "automator"
	if b.mainOnly != "" {
		name += "-" + b.mainOnly // -only latency,ping64 runs it twice
	}
	a, err := b.startAutomator(name)
	if err != nil {
		return err
	}
	pr, err := b.createAccount(a.dir, "bench")
	if err != nil {
		return err
	}
	pa, err := b.startProxy(pr, a.addr, "bench-a", instanceConcurrency)
	if err != nil {
		return err
	}
	pb, err := b.startProxy(pr, a.addr, "bench-b", instanceConcurrency)
	if err != nil {
		return err
	}
	cc, api, err := a.caller()
	if err != nil {
		return err
	}
	defer cc.Close()
	echoAddr, stopEcho, err := startEcho(a.dir)
	if err != nil {
		return err
	}
	defer stopEcho()
	ec, err := dial(echoAddr, a.caPEM, a.apiKey)
	if err != nil {
		return err
	}
	defer ec.Close()
	echo := automatorv1.NewAutomatorServiceClient(ec)
	pids := map[string]int{"automator": a.proc.pid(), "proxy bench-a": pa.pid(), "proxy bench-b": pb.pid(), "load generator": os.Getpid()}
	w := watch{pids: pids, metrics: metricsOf(a)}

	// Connections up, caches warm.
	for range 20 {
		if _, err := ping(ctx, api, "bench", "@ping"); err != nil {
			return fmt.Errorf("first @ping: %w", err)
		}
	}
	// The WAL at its working size: SQLite appends to a new WAL until its
	// first checkpoint (1,000 pages) and then writes it again from the
	// start, and a commit that appends costs about 0.1 ms more here
	// (docs/performance-history.md, the 08:16 round). A full run's rows
	// come after this much load anyway; -only latency would not.
	warm := closedLoop(ctx, 16, 0, time.Second, watch{}, func(ctx context.Context) error {
		_, err := ping(ctx, api, "bench", "@ping")
		return err
	})
	if err := loopErr("warming the WAL with @ping", warm); err != nil {
		return err
	}
	for run := 1; run <= b.p.runs && ctx.Err() == nil; run++ {
		if b.mainOnly == "ping64" {
			b.logf("main run %d/%d: raw echo and @ping, 64 callers", run, b.p.runs)
			if err := b.echo64(ctx, run, echo); err != nil {
				return err
			}
			if err := b.throughput(ctx, run, api, w, []int{64}); err != nil {
				return err
			}
			continue
		}
		if b.mainOnly == "tiny" {
			b.logf("main run %d/%d: raw fork/exec and tiny.sh, 64 callers", run, b.p.runs)
			if err := b.forkExec64(ctx, run); err != nil {
				return err
			}
			if err := b.scripts(ctx, run, api, w); err != nil {
				return err
			}
			continue
		}
		b.logf("main run %d/%d: baselines", run, b.p.runs)
		if err := b.baselines(ctx, run, echo); err != nil {
			return err
		}
		if b.mainOnly == "latency" {
			b.logf("main run %d/%d: latency", run, b.p.runs)
			if err := b.latency(ctx, run, api); err != nil {
				return err
			}
			continue
		}
		b.logf("main run %d/%d: @ping throughput", run, b.p.runs)
		if err := b.throughput(ctx, run, api, w, pingCallers); err != nil {
			return err
		}
		b.logf("main run %d/%d: latency", run, b.p.runs)
		if err := b.latency(ctx, run, api); err != nil {
			return err
		}
		b.logf("main run %d/%d: scripts", run, b.p.runs)
		if err := b.scripts(ctx, run, api, w); err != nil {
			return err
		}
	}
	if b.profDir != "" && ctx.Err() == nil && b.mainOnly == "" {
		b.profileThroughput(ctx, a, api, pids)
	}
	return ctx.Err()
}

// ping is one executeOnProxy call that must succeed.
func ping(ctx context.Context, api automatorv1.AutomatorServiceClient, account, script string) (*automatorv1.WorkStatus, error) {
	st, err := api.ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{
		Account: account,
		Command: &automatorv1.Command{Script: script},
		Timeout: durationpb.New(time.Minute),
	})
	if err != nil {
		return nil, err
	}
	if st.GetState() != automatorv1.State_STATE_SUCCEEDED || st.GetResult().GetExitCode() != 0 {
		return st, fmt.Errorf("work %s ended %v: %s", st.GetWorkId(), st.GetState(), st.GetReason())
	}
	return st, nil
}

// echoCaller makes one raw echo call.
func echoCaller(echo automatorv1.AutomatorServiceClient) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := echo.ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{
			Account: "bench", Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute),
		})
		return err
	}
}

// echo64 measures the raw echo at 64 callers, the baseline of @ping's.
func (b *bench) echo64(ctx context.Context, run int, echo automatorv1.AutomatorServiceClient) error {
	e64 := closedLoop(ctx, 64, b.p.warm, b.p.dur, watch{}, echoCaller(echo))
	if err := loopErr("raw gRPC echo", e64); err != nil {
		return err
	}
	b.res.baseline("echo_64", "raw gRPC echo, 64 callers", "calls/s").add(run, e64.rate)
	return nil
}

func (b *bench) baselines(ctx context.Context, run int, echo automatorv1.AutomatorServiceClient) error {
	r := b.res
	p := b.p
	echoCall := echoCaller(echo)
	e1 := closedLoop(ctx, 1, p.warm, p.dur, watch{}, echoCall)
	if err := loopErr("raw gRPC echo", e1); err != nil {
		return err
	}
	r.baseline("echo_1", "raw gRPC echo, 1 caller", "calls/s").add(run, e1.rate)
	r.baseline("echo_1_p50", "raw gRPC echo p50, 1 caller", "ms").add(run, ms(percentile(e1.lat, 50)))
	// The same call 10 ms apart, as the latency figure calls: each end has
	// gone idle in between, so the call also pays for waking both.
	var cold []time.Duration
	for range p.latCalls / 2 {
		time.Sleep(10 * time.Millisecond)
		t0 := time.Now()
		if err := echoCall(ctx); err != nil {
			return fmt.Errorf("raw gRPC echo: %w", err)
		}
		cold = append(cold, time.Since(t0))
	}
	r.baseline("echo_1_cold_p50", "raw gRPC echo p50, 1 caller, calls 10 ms apart", "ms").add(run, ms(percentile(cold, 50)))
	if err := b.echo64(ctx, run, echo); err != nil {
		return err
	}

	fsync, fsyncLat, err := b.fdatasyncRate(p.dur / 2)
	if err != nil {
		return fmt.Errorf("raw fdatasync: %w", err)
	}
	r.baseline("fdatasync", "raw fdatasync of 4 KiB, sequential", "syncs/s").add(run, fsync)
	r.baseline("fdatasync_p99", "raw fdatasync of 4 KiB, p99", "ms").add(run, ms(percentile(fsyncLat, 99)))

	s1, err := b.sqliteCycle(ctx, 1, p.warm, p.dur)
	if err == nil {
		err = loopErr("raw SQLite cycle", s1)
	}
	if err != nil {
		return err
	}
	r.baseline("sqlite_1", "raw durable SQLite cycle, 1 caller", "cycles/s").add(run, s1.rate)
	r.baseline("sqlite_1_ms", "raw durable SQLite cycle time p50, 1 caller", "ms").add(run, ms(percentile(s1.lat, 50)))
	r.baseline("echo_plus_sqlite_ms", "raw gRPC echo p50 + raw SQLite cycle p50", "ms").
		add(run, ms(percentile(e1.lat, 50))+ms(percentile(s1.lat, 50)))
	s64, err := b.sqliteCycle(ctx, 64, p.warm, p.dur)
	if err == nil {
		err = loopErr("raw SQLite cycle", s64)
	}
	if err != nil {
		return err
	}
	r.baseline("sqlite_64", "raw durable SQLite cycle, 64 callers", "cycles/s").add(run, s64.rate)
	for _, c := range []struct {
		batch      int
		key, name  string
		comparedTo string
	}{
		{1, "whatif_prepared", "what-if: SQLite cycle with prepared statements, 1 unit per transaction", "sqlite_1"},
		{64, "whatif_group64", "what-if: SQLite cycle, prepared, 64 units per transaction (group commit)", "sqlite_64"},
	} {
		rate, err := b.sqliteCeiling(ctx, c.batch, p.dur/2)
		if err != nil {
			r.notef("%s: %v", c.name, err)
			continue
		}
		f := r.fig(c.key, c.name, "cycles/s").add(run, rate).vs(c.comparedTo, goal{}, "")
		f.WhatIf = true
	}
	empty, err := b.emptyClaim(ctx, p.dur/4)
	if err != nil {
		return fmt.Errorf("raw empty claim: %w", err)
	}
	r.baseline("sqlite_empty_claim", "raw empty claim (SQLite, nothing queued)", "µs").add(run, float64(empty)/float64(time.Microsecond))

	return b.forkExec64(ctx, run)
}

// forkExec64 is the baseline of the scripts figure: the raw fork/exec of
// tiny.sh, 64 at once.
func (b *bench) forkExec64(ctx context.Context, run int) error {
	f64 := forkExec(ctx, b.tinyScript, 64, b.p.warm, b.p.dur)
	if err := loopErr("raw fork/exec", f64); err != nil {
		return err
	}
	b.res.baseline("fork_64", "raw fork/exec of tiny.sh, 64 at once", "starts/s").add(run, f64.rate)
	return nil
}

func (b *bench) throughput(ctx context.Context, run int, api automatorv1.AutomatorServiceClient, w watch, callers []int) error {
	r := b.res
	for _, n := range callers {
		// The automator's own stamps of each unit: where its time went.
		var mu sync.Mutex
		var enqClaim, claimEnd []time.Duration
		res := closedLoop(ctx, n, b.p.warm, b.p.dur, w, func(ctx context.Context) error {
			st, err := ping(ctx, api, "bench", "@ping")
			if err == nil {
				q, c, f := st.GetQueuedAt().AsTime(), st.GetClaimedAt().AsTime(), st.GetFinishedAt().AsTime()
				mu.Lock()
				enqClaim, claimEnd = append(enqClaim, c.Sub(q)), append(claimEnd, f.Sub(c))
				mu.Unlock()
			}
			return err
		})
		if err := loopErr("@ping", res); err != nil {
			return err
		}
		f := r.fig(fmt.Sprintf("ping_%d", n), fmt.Sprintf("`@ping` throughput, %s, 2 instances", plural(n, "caller")), "units/s").add(run, res.rate)
		switch n {
		case 1:
			f.vs("sqlite_1", goal{}, "")
		case 64:
			f.vs("echo_64", goal{goalRatioAtLeast, 0.20}, "≥ 20 % of raw gRPC echo, 64 callers")
			if b.mainOnly == "ping64" {
				break // no SQLite cycle measured
			}
			r.fig("ping_64_sqlite", "`@ping` throughput, 64 callers (vs the durable cycle)", "units/s").add(run, res.rate).
				vs("sqlite_64", goal{goalRatioAtLeast, 0.50}, "≥ 50 % of raw SQLite cycle, 64 callers")
		}
		if n == 1 || n == 64 {
			if share, ok := res.cpu["automator"]; ok && res.rate > 0 {
				r.fig(fmt.Sprintf("cpu_unit_%d", n), fmt.Sprintf("automator CPU per `@ping` unit, %s", plural(n, "caller")), "ms").
					add(run, 10*share/res.rate) // (share/100 cores) / rate, in ms
			}
		}
		if run == b.p.runs {
			mu.Lock()
			f.note("call latency p50 %s, p99 %s (automator's clock, p50: enqueue→claim %s, claim→result %s); %s; %s, last run",
				format(ms(percentile(res.lat, 50)), "ms"), format(ms(percentile(res.lat, 99)), "ms"),
				format(ms(percentile(enqClaim, 50)), "ms"), format(ms(percentile(claimEnd, 50)), "ms"),
				describeCPU(res.cpu, "automator", "proxy bench-a", "proxy bench-b", "load generator"), describeBatches(res))
			mu.Unlock()
		}
	}
	return nil
}

// latency is one caller, one call at a time, with both instances idle in
// their long poll between calls.
func (b *bench) latency(ctx context.Context, run int, api automatorv1.AutomatorServiceClient) error {
	var caller, callEnq, enqClaim, claimResult, resultAnswer []time.Duration
	for i := range b.p.latCalls + 10 {
		t0 := time.Now()
		st, err := ping(ctx, api, "bench", "@ping")
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		t1 := time.Now()
		if i >= 10 { // the first ten warm up
			caller = append(caller, t1.Sub(t0))
			q, c, f := st.GetQueuedAt().AsTime(), st.GetClaimedAt().AsTime(), st.GetFinishedAt().AsTime()
			// The load generator and the automator share this machine's
			// clock: the call splits into four stretches.
			callEnq = append(callEnq, q.Sub(t0))
			enqClaim = append(enqClaim, c.Sub(q))
			claimResult = append(claimResult, f.Sub(c))
			resultAnswer = append(resultAnswer, t1.Sub(f))
		}
		// Both instances back in their long poll.
		time.Sleep(10 * time.Millisecond)
	}
	r := b.res
	r.fig("lat_p50", "one caller: end-to-end p50", "ms").add(run, ms(percentile(caller, 50))).
		vs("sqlite_1_ms", goal{goalRatioAtMost, 2.5}, "≤ 2.5 × raw SQLite cycle time")
	r.fig("lat_p50_b", "one caller: end-to-end p50 (vs echo + cycle)", "ms").add(run, ms(percentile(caller, 50))).
		vs("echo_plus_sqlite_ms", goal{goalRatioAtMost, 3}, "≤ 3 × (raw echo p50 + raw SQLite cycle)")
	r.fig("lat_p90", "one caller: end-to-end p90", "ms").add(run, ms(percentile(caller, 90)))
	r.fig("lat_p99", "one caller: end-to-end p99", "ms").add(run, ms(percentile(caller, 99)))
	r.fig("lat_enq_claim_p50", "one caller: enqueue→claim p50 (automator's clock)", "ms").add(run, ms(percentile(enqClaim, 50)))
	r.fig("lat_enq_claim_p99", "one caller: enqueue→claim p99 (automator's clock)", "ms").add(run, ms(percentile(enqClaim, 99)))
	r.fig("lat_claim_result_p50", "one caller: claim→result p50 (automator's clock)", "ms").add(run, ms(percentile(claimResult, 50)))
	r.fig("lat_claim_result_p99", "one caller: claim→result p99 (automator's clock)", "ms").add(run, ms(percentile(claimResult, 99)))
	r.fig("lat_call_enq_p50", "one caller: call→enqueue p50 (caller's send to queued_at)", "ms").add(run, ms(percentile(callEnq, 50)))
	r.fig("lat_result_answer_p50", "one caller: result→answer p50 (finished_at to the caller's receipt)", "ms").add(run, ms(percentile(resultAnswer, 50)))
	return nil
}

func (b *bench) scripts(ctx context.Context, run int, api automatorv1.AutomatorServiceClient, w watch) error {
	res := closedLoop(ctx, 64, b.p.warm, b.p.dur, w, func(ctx context.Context) error {
		_, err := ping(ctx, api, "bench", "tiny.sh")
		return err
	})
	if err := loopErr("tiny.sh", res); err != nil {
		return err
	}
	f := b.res.fig("scripts_64", "tiny.sh throughput, 64 callers, 2 instances", "units/s").add(run, res.rate).
		vs("fork_64", goal{goalRatioAtLeast, 0.80}, "≥ 80 % of raw fork/exec, 64 at once")
	if run == b.p.runs {
		f.note("%s; %s, last run", describeCPU(res.cpu, "automator", "proxy bench-a", "proxy bench-b", "load generator"), describeBatches(res))
	}
	return nil
}

// loopErr turns a loop whose calls failed into an error: a figure made of
// failures would be meaningless.
func loopErr(what string, res loopResult) error {
	if res.errs > 0 {
		return fmt.Errorf("%s: %d calls failed, the first: %v", what, res.errs, res.firstErr)
	}
	if res.done == 0 {
		return fmt.Errorf("%s: no call completed in the measured interval", what)
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
