//go:build linux

package proctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// What a growth test serves: units of every kind, in a cycle, so that what
// the automator and the proxies hold can be compared after a first batch
// and after a larger one. A test writes MixScripts into its instances'
// scripts directory, serves batches with ServeMix (multiples of MixKinds
// units), waits with AwaitMixEnded, and compares TakeHeld before and after.

// mixSleep is the argument of the sleeping script's `sleep`, a value no other
// test uses, so that a sleep a proxy failed to kill can be found in /proc
// whoever its parent became.
const mixSleep = "29.731"

// mixKinds is the cycle of kinds ServeMix runs, by unit index.
var mixKinds = [...]string{"@ping", "stdin", "exit code", "not deployed", "cancelled running",
	"submit and wait", "caller gives up", "idempotent twice", "@ping", "timed out running"}

// MixKinds is the length of ServeMix's cycle of kinds.
const MixKinds = len(mixKinds)

// MixScripts writes the scripts ServeMix's units run into dir.
func MixScripts(t testing.TB, dir string) {
	t.Helper()
	WriteScript(t, dir, "echo.sh", `cat; echo " $1"`)
	WriteScript(t, dir, "exit.sh", `exit "$1"`)
	WriteScript(t, dir, "sleep.sh", `exec sleep "$1"`)
}

// ServeMix runs units units of account from 16 callers, unit i over
// clients[i%len(clients)] as kind i%MixKinds, and fails the test on any
// unit that did not end as its kind should. The kinds: `@ping`, a script
// with stdin, a script's exit code, a script not deployed, a unit cancelled
// once handed out (its script killed), one submitted and waited for, a
// caller that gives up while its unit runs, an idempotent call repeated,
// and a unit timed out while its script runs. phase names the batch in
// idempotency keys and messages.
func ServeMix(t testing.TB, clients []automatorv1.AutomatorServiceClient, account, phase string, units int) {
	t.Helper()
	start := time.Now()
	next := make(chan int)
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := serveMixUnit(clients[i%len(clients)], account, phase, i); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("unit %d (%s): %v", i, mixKinds[i%MixKinds], err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range units {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		sort.Strings(errs)
		t.Fatalf("%s: %d of %d units did not end as they should:\n%s", phase, len(errs), units, strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	t.Logf("%s: %d units took %v", phase, units, time.Since(start).Round(time.Millisecond))
}

func serveMixUnit(c automatorv1.AutomatorServiceClient, account, phase string, i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// want checks the unit's end; of a success, its exit code and the
	// beginning of its stdout.
	want := func(st *automatorv1.WorkStatus, err error, state automatorv1.State, exit int32, stdout string) error {
		switch {
		case err != nil:
			return err
		case st.State != state:
			return fmt.Errorf("ended %v (%s), want %v", st.State, st.Reason, state)
		case state == automatorv1.State_STATE_SUCCEEDED && (st.Result.GetExitCode() != exit || !strings.HasPrefix(string(st.Result.GetStdout()), stdout)):
			return fmt.Errorf("exit %d, stdout %q; want %d, %q first", st.Result.GetExitCode(), st.Result.GetStdout(), exit, stdout)
		}
		return nil
	}
	req := func(script string, args ...string) *automatorv1.ExecuteRequest {
		return &automatorv1.ExecuteRequest{Account: account, Command: &automatorv1.Command{Script: script, Args: args}}
	}
	const ping = "instance_id=" // the beginning of @ping's stdout
	switch mixKinds[i%MixKinds] {
	case "@ping":
		st, err := c.ExecuteOnProxy(ctx, req("@ping"))
		return want(st, err, automatorv1.State_STATE_SUCCEEDED, 0, ping)
	case "stdin":
		r := req("echo.sh", strconv.Itoa(i))
		r.Command.Stdin = []byte("in")
		st, err := c.ExecuteOnProxy(ctx, r)
		return want(st, err, automatorv1.State_STATE_SUCCEEDED, 0, fmt.Sprintf("in %d\n", i))
	case "exit code":
		st, err := c.ExecuteOnProxy(ctx, req("exit.sh", "3"))
		return want(st, err, automatorv1.State_STATE_SUCCEEDED, 3, "")
	case "not deployed":
		st, err := c.ExecuteOnProxy(ctx, req("not-deployed.sh"))
		return want(st, err, automatorv1.State_STATE_FAILED, 0, "")
	case "cancelled running":
		w, err := c.Submit(ctx, req("sleep.sh", mixSleep))
		if err != nil {
			return err
		}
		// Handed to a waiting poll as it is stored, the unit is mostly
		// claimed by now and its script starting or running: the proxy
		// kills it. One still queued is cancelled as well.
		if _, err := c.Cancel(ctx, &automatorv1.CancelRequest{WorkId: w.WorkId}); err != nil {
			return err
		}
		st, err := c.Wait(ctx, &automatorv1.WaitRequest{WorkId: w.WorkId})
		return want(st, err, automatorv1.State_STATE_CANCELLED, 0, "")
	case "submit and wait":
		w, err := c.Submit(ctx, req("exit.sh", "0"))
		if err != nil {
			return err
		}
		st, err := c.Wait(ctx, &automatorv1.WaitRequest{WorkId: w.WorkId})
		return want(st, err, automatorv1.State_STATE_SUCCEEDED, 0, "")
	case "caller gives up":
		// The caller's context ends while the script sleeps: the unit
		// runs on to its end without anyone waiting for it.
		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		defer stop()
		_, err := c.ExecuteOnProxy(short, req("sleep.sh", "0.3"))
		if status.Code(err) != codes.DeadlineExceeded {
			return fmt.Errorf("a call given 50ms on a script sleeping 0.3s: %v, want the caller's deadline exceeded", err)
		}
		return nil
	case "idempotent twice":
		r := req("@ping")
		r.IdempotencyKey = fmt.Sprintf("%s-%d", strings.ReplaceAll(phase, " ", "-"), i)
		first, err := c.ExecuteOnProxy(ctx, r)
		if err := want(first, err, automatorv1.State_STATE_SUCCEEDED, 0, ping); err != nil {
			return err
		}
		again, err := c.ExecuteOnProxy(ctx, r)
		if err == nil && again.WorkId != first.WorkId {
			return fmt.Errorf("the same idempotency key gave %s, then %s", first.WorkId, again.WorkId)
		}
		return want(again, err, automatorv1.State_STATE_SUCCEEDED, 0, ping)
	case "timed out running":
		r := req("sleep.sh", mixSleep)
		r.Timeout = durationpb.New(time.Second)
		st, err := c.ExecuteOnProxy(ctx, r)
		return want(st, err, automatorv1.State_STATE_TIMED_OUT, 0, "")
	}
	return errors.New("no such kind")
}

// AwaitMixEnded waits until every unit of account the automators serving on
// httpAddrs queued has ended, by their metrics (a caller that gives up
// leaves its unit running), summed over the automators.
func AwaitMixEnded(t testing.TB, httpAddrs []string, account string) {
	t.Helper()
	sum := func(sample string) int {
		n := 0
		for _, a := range httpAddrs {
			v, _ := MetricValue(a, sample)
			n += v
		}
		return n
	}
	WaitFor(t, 30*time.Second, "every unit to end", func() bool {
		queued := sum(fmt.Sprintf("automator_work_queued_total{account=%q}", account))
		ended := 0
		for _, s := range []string{"succeeded", "failed", "timed_out", "cancelled"} {
			ended += sum(fmt.Sprintf("automator_work_finished_total{account=%q,state=%q}", account, s))
		}
		return queued > 0 && queued == ended
	})
}

// Held is what a growth test compares: per automator its goroutines and
// open files, per proxy its open files, and the sleeps of ServeMix's
// scripts still running anywhere.
type Held struct {
	Goroutines, FDs []int // per automator, as their /metrics say
	ProxyFDs        []int // per proxy, from /proc
	Sleeping        []int // pids
}

// TakeHeld reads Held of the automators serving HTTP on httpAddrs and the
// proxies of proxyPIDs.
func TakeHeld(t testing.TB, httpAddrs []string, proxyPIDs []int) Held {
	t.Helper()
	var h Held
	for _, a := range httpAddrs {
		g, err := MetricValue(a, "go_goroutines")
		if err != nil {
			t.Fatal(err)
		}
		fds, err := MetricValue(a, "process_open_fds")
		if err != nil {
			t.Fatal(err)
		}
		h.Goroutines, h.FDs = append(h.Goroutines, g), append(h.FDs, fds)
	}
	for _, pid := range proxyPIDs {
		h.ProxyFDs = append(h.ProxyFDs, OpenFiles(t, pid))
	}
	h.Sleeping = mixSleepsRunning()
	return h
}

// OpenFiles is the number of the file descriptors process pid holds.
func OpenFiles(t testing.TB, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	return len(fds)
}

func (h Held) String() string {
	return fmt.Sprintf("automators: %v goroutines, %v open files; proxies: %v open files; %d scripts still sleeping",
		h.Goroutines, h.FDs, h.ProxyFDs, len(h.Sleeping))
}

// GrownFrom says what grew beyond base by more than a quiet process's
// working set allows: a few goroutines and descriptors come and go with
// timers, flushes, polls and the metrics' own connection.
func (h Held) GrownFrom(base Held) []string {
	var grown []string
	for i := range h.Goroutines {
		if h.Goroutines[i] > base.Goroutines[i]+20 {
			grown = append(grown, fmt.Sprintf("automator %d's goroutines: %d, was %d", i, h.Goroutines[i], base.Goroutines[i]))
		}
		if h.FDs[i] > base.FDs[i]+4 {
			grown = append(grown, fmt.Sprintf("automator %d's open files: %d, was %d", i, h.FDs[i], base.FDs[i]))
		}
	}
	for i, n := range h.ProxyFDs {
		if n > base.ProxyFDs[i]+3 {
			grown = append(grown, fmt.Sprintf("proxy %d's open files: %d, was %d", i, n, base.ProxyFDs[i]))
		}
	}
	if len(h.Sleeping) > 0 {
		grown = append(grown, fmt.Sprintf("scripts of cancelled or timed-out units still running: pids %v", h.Sleeping))
	}
	return grown
}

// AwaitNoGrowth waits up to within until what take reads has grown no
// more from base than GrownFrom allows (what a closed connection, a unit's
// last write or a script's end held takes a moment to go), and returns
// what it read last. Past within it fails the test, saying after what
// (after), what grew, and the goroutines of automators (Goroutines, which
// ends them).
func AwaitNoGrowth(t testing.TB, within time.Duration, after string, base Held, take func() Held, automators ...*Proc) Held {
	t.Helper()
	var now Held
	grown := func() []string { now = take(); return now.GrownFrom(base) }
	if !Poll(within, func() bool { return len(grown()) == 0 }) {
		what := grown()
		dumps := make([]string, len(automators))
		for i, p := range automators {
			dumps[i] = Goroutines(t, p)
		}
		t.Fatalf("%s:\n  %s\nbefore: %s\nnow: %s\n%s", after, strings.Join(what, "\n  "), base, now, strings.Join(dumps, "\n"))
	}
	return now
}

// MetricValue reads one sample of an automator's /metrics, by its name and
// labels, as an integer.
func MetricValue(httpAddr, sample string) (int, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("/metrics of %s has no %s", httpAddr, sample)
}

// mixSleepsRunning lists the pids of `sleep mixSleep` processes.
func mixSleepsRunning() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if string(cmdline) == "sleep\x00"+mixSleep+"\x00" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Goroutines makes the Go process p write its goroutines (SIGQUIT, which
// also ends it) and sums them up by the function that started them, the
// most first.
func Goroutines(t testing.TB, p *Proc) string {
	t.Helper()
	p.Signal(t, syscall.SIGQUIT)
	p.Wait(t, 15*time.Second)
	by := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^created by (\S+)`).FindAllStringSubmatch(p.Log(), -1) {
		by[m[1]]++
	}
	fns := make([]string, 0, len(by))
	for fn := range by {
		fns = append(fns, fn)
	}
	sort.Slice(fns, func(i, j int) bool { return by[fns[i]] > by[fns[j]] })
	var b strings.Builder
	fmt.Fprintf(&b, "%s's goroutines by the function that started them:", p.name)
	for _, fn := range fns[:min(len(fns), 15)] {
		fmt.Fprintf(&b, "\n  %5d %s", by[fn], fn)
	}
	return b.String()
}
