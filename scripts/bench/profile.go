//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// fetchProfile saves /debug/pprof/<path> of the automator as name in the
// profile directory, with a `go tool pprof -top` summary beside it.
func (b *bench) fetchProfile(ctx context.Context, a *automator, path, name string, timeout time.Duration) {
	if a.pprofAddr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.pprofAddr+"/debug/pprof/"+path, nil)
	if err != nil {
		b.res.notef("profile %s: %v", name, err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.res.notef("profile %s: %v (is AUTOMATOR_PPROF_ADDR supported by this automator build?)", name, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		b.res.notef("profile %s: %s: %s", name, resp.Status, strings.TrimSpace(string(msg)))
		return
	}
	file := filepath.Join(b.profDir, name)
	f, err := os.Create(file)
	if err != nil {
		b.res.notef("profile %s: %v", name, err)
		return
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.res.notef("profile %s: %v", name, err)
		return
	}
	b.mu.Lock()
	b.profiles = append(b.profiles, file)
	b.mu.Unlock()
	// A readable summary, if the go tool is at hand.
	if out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", b.automatorBin(), file).Output(); err == nil {
		_ = os.WriteFile(file+".top.txt", out, 0o644)
	}
}

// profileSeconds is how long each profile of a loaded automator runs.
func (b *bench) profileSeconds() int {
	if b.p.runs == 1 && b.p.dur < 2*time.Second {
		return 2 // -quick
	}
	return 10
}

// profileLoad profiles automator a during extra seconds of n callers making
// call (not counted in the table), saved as prefix.{cpu,block,mutex}.pprof:
// first the CPU alone, then blocking and mutex contention together over as
// many seconds again. Not at once: while a block profile is taken, every
// blocking event records its stack, and a CPU profile taken meanwhile
// showed that recording (the unwinder, and the stack growth it causes) as
// about 5 % of the automator's CPU at 64 callers.
func (b *bench) profileLoad(ctx context.Context, a *automator, prefix string, n int, pids map[string]int, order []string, call func(context.Context) error) {
	secs := b.profileSeconds()
	b.logf("profiling %s: 2 × %d s of @ping at %s", a.name, secs, plural(n, "caller"))
	var cpu loopResult
	for i, profiles := range [][]struct{ path, name string }{
		{{fmt.Sprintf("profile?seconds=%d", secs), prefix + ".cpu.pprof"}},
		{
			{fmt.Sprintf("block?seconds=%d", secs), prefix + ".block.pprof"},
			{fmt.Sprintf("mutex?seconds=%d", secs), prefix + ".mutex.pprof"},
		},
	} {
		var wg sync.WaitGroup
		for _, p := range profiles {
			wg.Go(func() { b.fetchProfile(ctx, a, p.path, p.name, time.Duration(secs+30)*time.Second) })
		}
		res := closedLoop(ctx, n, 0, time.Duration(secs)*time.Second+500*time.Millisecond, watch{pids: pids}, call)
		wg.Wait()
		if i == 0 {
			cpu = res
		}
	}
	b.res.notef("profiled %s (%s): %.0f units/s during the CPU profile; %s", prefix, plural(n, "caller"), cpu.rate, describeCPU(cpu.cpu, order...))
}

// profileThroughput profiles the SQLite automator at 1 and at 64 callers,
// then its heap.
func (b *bench) profileThroughput(ctx context.Context, a *automator, api automatorv1.AutomatorServiceClient, pids map[string]int) {
	for _, n := range []int{1, 64} {
		b.profileLoad(ctx, a, fmt.Sprintf("automator-ping%d", n), n, pids,
			[]string{"automator", "proxy bench-a", "proxy bench-b", "load generator"},
			func(ctx context.Context) error {
				_, err := ping(ctx, api, "bench", "@ping")
				return err
			})
	}
	b.fetchProfile(ctx, a, "heap", "automator-ping.heap.pprof", 30*time.Second)
}

// profileIdle profiles the automator during one more idle window.
func (b *bench) profileIdle(ctx context.Context, a *automator) {
	secs := int(b.p.idleWindow / time.Second)
	b.logf("profiling the idle automator: %d s", secs)
	b.fetchProfile(ctx, a, fmt.Sprintf("profile?seconds=%d", secs), "automator-idle.cpu.pprof", time.Duration(secs+30)*time.Second)
	b.fetchProfile(ctx, a, "heap", "automator-idle.heap.pprof", 30*time.Second)
	b.fetchProfile(ctx, a, "goroutine", "automator-idle.goroutine.pprof", 30*time.Second)
}
