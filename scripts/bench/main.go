//go:build linux

// Command bench is `make bench`: it measures the automator and its proxies
// as real processes on loopback (an automator on durable SQLite in a
// temporary directory, proxy instances, this program as the callers and as
// raw pollers) beside baselines measured in the same run (raw gRPC echo with
// the same TLS and server options, the raw durable SQLite cycle of plain
// statements on the product's schema, raw fdatasync, raw fork/exec of the same script, and for
// PostgreSQL the raw FOR UPDATE SKIP LOCKED cycle). It prints a markdown
// table (median of the runs, min–max, baseline, ratio, target, verdict) and
// writes the same as JSON. docs/performance.md explains every figure.
//
// Usage (make bench builds the binaries first):
//
//	go run ./scripts/bench -bin bin [-runs 3] [-out bench-results.json]
//	    [-profile DIR] [-quick] [-only main,wakeup,idle,pg]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// params are the sizes and durations of one bench run.
type params struct {
	runs       int
	warm, dur  time.Duration // each throughput measurement
	latCalls   int           // sequential calls per latency run
	pollers    int           // wake-up test
	wakeRounds int           // units enqueued per wake-up run (100: a p99 that is not the slowest)
	idle       int           // idle instances
	idleWindow time.Duration // one idle measurement
}

func defaultParams() params {
	return params{
		runs: 3, warm: time.Second, dur: 4 * time.Second, latCalls: 200,
		pollers: 1000, wakeRounds: 100, idle: 10000, idleWindow: 30 * time.Second,
	}
}

// quickParams make a smoke run of a minute or so: the same code paths,
// figures too short to quote.
func quickParams() params {
	return params{
		runs: 1, warm: 200 * time.Millisecond, dur: time.Second, latCalls: 20,
		pollers: 100, wakeRounds: 5, idle: 200, idleWindow: 3 * time.Second,
	}
}

type bench struct {
	p          params
	binDir     string
	tmp        string
	scriptsDir string
	tinyScript string
	profDir    string // "" unless profiling
	res        *results
	profiles   []string
	progress   io.Writer
	began      time.Time
	// mainOnly narrows the main section for quick iteration: "latency"
	// (the baselines and the one-caller latency), "ping64" (the raw echo
	// and @ping at 64 callers) or "tiny" (the raw fork/exec and tiny.sh at
	// 64 callers); "" runs all of it.
	mainOnly string

	mu    sync.Mutex
	procs []*proc
	// abort ends the running section, with why: a child it started
	// exited unasked.
	abort context.CancelCauseFunc
}

func (b *bench) automatorBin() string { return filepath.Join(b.binDir, "automator") }
func (b *bench) proxyBin() string     { return filepath.Join(b.binDir, "proxy") }

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "bench %6.1fs: %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
}

func numCPU() int { return runtime.NumCPU() }

var sections = []string{"main", "wakeup", "idle", "pg"}

// extraSections run only when named: parts of main for quick iteration.
// "latency" measures one caller (the baselines and the latency); "ping64"
// the raw echo and @ping at 64 callers, a change's effect on which needs
// many runs on a noisy machine; "tiny" the raw fork/exec and tiny.sh at 64
// callers, for the same reason.
var extraSections = []string{"latency", "ping64", "tiny"}

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binDir := fs.String("bin", "bin", "directory holding the automator and proxy binaries (make build)")
	out := fs.String("out", "bench-results.json", "where to write the results as JSON")
	profDir := fs.String("profile", "", "write CPU, heap, block and goroutine profiles of the automator into this directory")
	quick := fs.Bool("quick", false, "a short smoke run (figures not meaningful)")
	only := fs.String("only", strings.Join(sections, ","), "sections to run: "+strings.Join(sections, ","))
	runs := fs.Int("runs", 0, "runs per figure (default 3; 1 with -quick)")
	idle := fs.Int("idle-instances", 0, "idle instances of the idle-scale test (default 10000)")
	pollers := fs.Int("pollers", 0, "idle pollers of the wake-up test (default 1000)")
	keep := fs.Bool("keep", false, "keep the temporary directory (logs, databases)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	p := defaultParams()
	if *quick {
		p = quickParams()
	}
	if *runs > 0 {
		p.runs = *runs
	}
	if *idle > 0 {
		p.idle = *idle
	}
	if *pollers > 0 {
		p.pollers = *pollers
	}
	want := strings.Split(*only, ",")
	for _, s := range want {
		if !slices.Contains(sections, s) && !slices.Contains(extraSections, s) {
			fmt.Fprintf(stderr, "bench: -only %q: unknown section %q (sections: %s; also %s)\n", *only, s, strings.Join(sections, ","), strings.Join(extraSections, ","))
			return 2
		}
	}

	b := &bench{p: p, res: newResults(), progress: stderr, began: time.Now()}
	var err error
	if b.binDir, err = filepath.Abs(*binDir); err != nil {
		fmt.Fprintf(stderr, "bench: -bin: %v\n", err)
		return 2
	}
	for _, bin := range []string{b.automatorBin(), b.proxyBin()} {
		if _, err := os.Stat(bin); err != nil {
			fmt.Fprintf(stderr, "bench: %v; run `make build` first (or give -bin)\n", err)
			return 2
		}
	}
	if *profDir != "" {
		if b.profDir, err = filepath.Abs(*profDir); err == nil {
			err = os.MkdirAll(b.profDir, 0o755)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: -profile: %v\n", err)
			return 2
		}
	}
	if b.tmp, err = os.MkdirTemp("", "opsgate-bench-"); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	defer func() {
		b.stopAll()
		if *keep {
			fmt.Fprintf(stderr, "bench: kept %s\n", b.tmp)
		} else {
			os.RemoveAll(b.tmp)
		}
	}()
	// Children inherit the limit: the automator must hold every idle
	// instance's connection, and this program the other end of each.
	want64 := uint64(p.idle + p.pollers + 4096)
	if got, err := raiseNoFile(want64); err != nil || got < want64 {
		b.res.notef("open-file limit is %d, below the %d the idle test needs (%v); it may fail", got, want64, err)
	}
	if err := b.writeScripts(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}

	started := time.Now()
	loadAtStart := loadavg()
	machine := meterCPU(nil)
	b.logf("%d run(s) of: %s; work directory %s", p.runs, strings.Join(want, ", "), b.tmp)
	failed := false
	for _, s := range append(slices.Clone(sections), extraSections...) {
		if !slices.Contains(want, s) || ctx.Err() != nil {
			continue
		}
		var err error
		sctx, abort := context.WithCancelCause(ctx)
		b.mu.Lock()
		b.abort = abort
		b.mu.Unlock()
		switch s {
		case "main":
			err = b.mainSection(sctx)
		case "latency", "ping64", "tiny":
			b.mainOnly = s
			err = b.mainSection(sctx)
		case "wakeup":
			err = b.wakeSection(sctx)
		case "idle":
			err = b.idleSection(sctx)
		case "pg":
			err = b.pgSection(sctx)
		}
		b.stopAll()
		b.mu.Lock()
		b.abort = nil
		b.mu.Unlock()
		if cause := context.Cause(sctx); cause != nil && ctx.Err() == nil {
			err = cause // a child's exit, which the section's error (if any) only follows
		}
		abort(nil)
		if err != nil {
			b.logf("section %s failed: %v", s, err)
			b.res.notef("section %s failed: %v", s, err)
			// PostgreSQL is optional: its rows then say why they are empty.
			failed = failed || s != "pg"
		}
	}
	if !slices.Contains(want, "pg") {
		b.pgNotMeasured("section not run (-only)")
	}
	b.res.finish()

	use := machine.read()
	fmt.Fprintf(stdout, "\n%s\n\n%d CPUs; load average %s at the start, %s at the end; the machine busy %.0f %% and %s %.1f %% of a core over the run; %v\n\n",
		commandLine(args), runtime.NumCPU(), loadAtStart, loadavg(), use[machineName], stealName, use[stealName], time.Since(started).Round(time.Second))
	b.res.table(stdout)
	fmt.Fprintln(stdout)
	b.res.details(stdout)
	for _, p := range b.profiles {
		fmt.Fprintf(stdout, "- profile: %s\n", p)
	}
	rep := report{
		Started: started, Finished: time.Now(), Command: commandLine(args), Runs: p.runs,
		Host: hostInfo(loadAtStart, use), Figures: b.res.figs, Notes: b.res.notes, Profiles: b.profiles,
	}
	if err := writeJSON(*out, rep); err != nil {
		fmt.Fprintf(stderr, "bench: writing %s: %v\n", *out, err)
		return 1
	}
	b.logf("wrote %s; took %v", *out, time.Since(started).Round(time.Second))
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

// writeScripts writes the proxy's scripts directory: tiny.sh, the smallest
// real script.
func (b *bench) writeScripts() error {
	b.scriptsDir = filepath.Join(b.tmp, "scripts")
	if err := os.MkdirAll(b.scriptsDir, 0o755); err != nil {
		return err
	}
	b.tinyScript = filepath.Join(b.scriptsDir, "tiny.sh")
	return os.WriteFile(b.tinyScript, []byte("#!/bin/sh\necho ok\n"), 0o755)
}

func commandLine(args []string) string {
	return strings.TrimSpace("bench " + strings.Join(args, " "))
}

// loadavg is the 1, 5 and 15 minute load averages.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func hostInfo(loadAtStart string, use map[string]float64) map[string]string {
	h := map[string]string{
		"cpus": fmt.Sprint(runtime.NumCPU()),
		"go":   runtime.Version(),
		"os":   runtime.GOOS + "/" + runtime.GOARCH,
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h["kernel"] = strings.TrimSpace(string(data))
	}
	h["loadavg_at_start"] = loadAtStart
	h["loadavg_at_end"] = loadavg()
	// In % of one core over the whole run.
	h["machine_busy_percent"] = fmt.Sprintf("%.1f", use[machineName])
	h["stolen_percent"] = fmt.Sprintf("%.1f", use[stealName])
	if name, err := os.Hostname(); err == nil {
		h["hostname"] = name
	}
	return h
}
