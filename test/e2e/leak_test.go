//go:build linux

package e2e

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

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// leakSleep is the argument of the sleeping script's `sleep`, a value no
// other test uses, so that a sleep the proxy failed to kill can be found in
// /proc whoever its parent became.
const leakSleep = "29.731"

// The automator and the proxy run for months: nothing they hold may grow with
// the units they serve. Two instances serve a first batch of units of every
// kind (so that pools, caches and threads reach their working size), then a
// batch six times larger over fresh connections; once the units have ended
// and those connections are closed, the automator holds no more goroutines
// and file descriptors than after the first batch, and the proxies no more
// file descriptors and no script still running. The kinds: `@ping`, a
// script with stdin, a script's exit code, a script not deployed, a unit
// cancelled while it runs, one submitted and waited for, a caller that gives
// up while its unit runs, an idempotent submission repeated, and units
// timed out while they run.
//
// Not parallel: like the active/active test it loads the machine, and the
// timing-sensitive tests run after it.
func TestNothingGrowsWithTheUnitsServed(t *testing.T) {
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "echo.sh", `cat; echo " $1"`)
	writeScript(t, scripts, "exit.sh", `exit "$1"`)
	writeScript(t, scripts, "sleep.sh", `exec sleep "$1"`)
	pa := startProxy(t, cfg, scripts, "a")
	pb := startProxy(t, cfg, scripts, "b")
	pa.WaitPolling(t)
	pb.WaitPolling(t)
	caPEM, err := os.ReadFile(filepath.Join(a.DataDir, config.FileCACert))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(a.DataDir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}

	// serveBatch runs units over conns fresh connections (closed at its
	// end) from 16 callers, and fails the test on any unit that did not end
	// as its kind should.
	serveBatch := func(phase string, units, conns int) {
		defer func(start time.Time) {
			t.Logf("%s: %d units took %v", phase, units, time.Since(start).Round(time.Millisecond))
		}(time.Now())
		clients := make([]automatorv1.AutomatorServiceClient, conns)
		for i := range clients {
			conn := proctest.Dial(t, a.GRPCAddr, caPEM, strings.TrimSpace(string(key)))
			defer conn.Close()
			clients[i] = automatorv1.NewAutomatorServiceClient(conn)
		}
		next := make(chan int)
		var (
			mu   sync.Mutex
			errs []string
		)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := range next {
					if err := serveUnit(clients[i%len(clients)], phase, i); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Sprintf("unit %d (kind %d): %v", i, i%len(unitKinds), err))
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
	}

	// Every unit must have ended (a caller that gives up leaves its unit
	// running) before anything is counted.
	settle := func(phase string) {
		waitFor(t, 30*time.Second, phase+": every unit ended", func() bool {
			queued, _ := metricValue(a.HTTPAddr, `automator_work_queued_total{account="acme"}`)
			done, _ := metricValue(a.HTTPAddr, `automator_work_finished_total{account="acme",state="succeeded"}`)
			failed, _ := metricValue(a.HTTPAddr, `automator_work_finished_total{account="acme",state="failed"}`)
			timedOut, _ := metricValue(a.HTTPAddr, `automator_work_finished_total{account="acme",state="timed_out"}`)
			cancelled, _ := metricValue(a.HTTPAddr, `automator_work_finished_total{account="acme",state="cancelled"}`)
			return queued > 0 && queued == done+failed+timedOut+cancelled
		})
	}

	const warm, counted = 160, 960 // multiples of the kinds' cycle
	serveBatch("first batch", warm, 4)
	settle("first batch")
	base := take(t, a, pa, pb)
	t.Logf("after %d units: %s", warm, base)

	serveBatch("second batch", counted, 8)
	settle("second batch")
	// Goroutines of a caller's closed connection, of a unit's last write or
	// of a script's end take a moment to return: wait for them, up to a
	// bound, before calling what is left a leak.
	var now counts
	grown := func() []string {
		now = take(t, a, pa, pb)
		return now.grownFrom(base)
	}
	if !proctest.Poll(20*time.Second, func() bool { return len(grown()) == 0 }) {
		t.Errorf("after %d more units, their connections closed:\n  %s\nwas after the first %d: %s\nnow: %s%s",
			counted, strings.Join(grown(), "\n  "), warm, base, now, goroutineDump(t, a))
	}
	t.Logf("after %d more units: %s", counted, now)
}

// unitKinds is the cycle of kinds serveUnit runs, by index.
var unitKinds = []string{"@ping", "stdin", "exit code", "not deployed", "cancelled running", "submit and wait", "caller gives up", "idempotent twice", "@ping", "timed out running"}

// serveUnit runs unit i of a batch as kind i%len(unitKinds) and checks how
// it ended.
func serveUnit(c automatorv1.AutomatorServiceClient, phase string, i int) error {
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
		return &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: script, Args: args}}
	}
	switch unitKinds[i%len(unitKinds)] {
	case "@ping":
		st, err := c.ExecuteOnProxy(ctx, req("@ping"))
		return want(st, err, automatorv1.State_STATE_SUCCEEDED, 0, "instance_id=")
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
		w, err := c.Submit(ctx, req("sleep.sh", leakSleep))
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
		if err := want(first, err, automatorv1.State_STATE_SUCCEEDED, 0, "instance_id="); err != nil {
			return err
		}
		again, err := c.ExecuteOnProxy(ctx, r)
		if err == nil && again.WorkId != first.WorkId {
			return fmt.Errorf("the same idempotency key gave %s, then %s", first.WorkId, again.WorkId)
		}
		return want(again, err, automatorv1.State_STATE_SUCCEEDED, 0, "instance_id=")
	case "timed out running":
		r := req("sleep.sh", leakSleep)
		r.Timeout = durationpb.New(time.Second)
		st, err := c.ExecuteOnProxy(ctx, r)
		return want(st, err, automatorv1.State_STATE_TIMED_OUT, 0, "")
	}
	return errors.New("no such kind")
}

// counts is what is checked for growth.
type counts struct {
	goroutines, fds int    // the automator's (its /metrics)
	proxyFDs        [2]int // each proxy's open file descriptors (/proc)
	sleeping        []int  // pids of leakSleep sleeps still running
}

func (c counts) String() string {
	return fmt.Sprintf("automator: %d goroutines, %d fds; proxies: %d and %d fds; %d scripts still sleeping",
		c.goroutines, c.fds, c.proxyFDs[0], c.proxyFDs[1], len(c.sleeping))
}

// grownFrom says what grew beyond base by more than the working set of a
// quiet process allows: a few goroutines and descriptors come and go with
// timers, flushes and the proxies' polls.
func (c counts) grownFrom(base counts) []string {
	var grown []string
	if c.goroutines > base.goroutines+20 {
		grown = append(grown, fmt.Sprintf("the automator's goroutines: %d, was %d", c.goroutines, base.goroutines))
	}
	if c.fds > base.fds+4 {
		grown = append(grown, fmt.Sprintf("the automator's open file descriptors: %d, was %d", c.fds, base.fds))
	}
	for i, n := range c.proxyFDs {
		if n > base.proxyFDs[i]+3 {
			grown = append(grown, fmt.Sprintf("proxy %c's open file descriptors: %d, was %d", 'a'+i, n, base.proxyFDs[i]))
		}
	}
	if len(c.sleeping) > 0 {
		grown = append(grown, fmt.Sprintf("scripts of cancelled or timed-out units still running: pids %v", c.sleeping))
	}
	return grown
}

func take(t *testing.T, a *automator, pa, pb *proxy) counts {
	t.Helper()
	var c counts
	var err error
	if c.goroutines, err = metricValue(a.HTTPAddr, "go_goroutines"); err != nil {
		t.Fatal(err)
	}
	if c.fds, err = metricValue(a.HTTPAddr, "process_open_fds"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []*proxy{pa, pb} {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid()))
		if err != nil {
			t.Fatalf("proxy %s: %v", p.InstanceID, err)
		}
		c.proxyFDs[i] = len(fds)
	}
	c.sleeping = sleepsRunning()
	return c
}

// metricValue reads one sample of the automator's /metrics by its name and
// labels, as an integer.
func metricValue(httpAddr, sample string) (int, error) {
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
	return 0, fmt.Errorf("/metrics has no %s", sample)
}

// sleepsRunning lists the pids of `sleep leakSleep` processes.
func sleepsRunning() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if string(cmdline) == "sleep\x00"+leakSleep+"\x00" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// goroutineDump makes the automator write its goroutines (SIGQUIT, which
// also ends it) and sums them up by the function that started them.
func goroutineDump(t *testing.T, a *automator) string {
	t.Helper()
	a.proc.Signal(t, syscall.SIGQUIT)
	a.proc.Wait(t, 15*time.Second)
	created := regexp.MustCompile(`(?m)^created by (\S+)`)
	by := map[string]int{}
	for _, m := range created.FindAllStringSubmatch(a.Log(), -1) {
		by[m[1]]++
	}
	type n struct {
		fn string
		n  int
	}
	var ns []n
	for fn, c := range by {
		ns = append(ns, n{fn, c})
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i].n > ns[j].n })
	var b strings.Builder
	b.WriteString("\nthe automator's goroutines by the function that started them:")
	for _, x := range ns[:min(len(ns), 15)] {
		fmt.Fprintf(&b, "\n  %5d %s", x.n, x.fn)
	}
	return b.String()
}
