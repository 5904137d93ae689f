//go:build linux

package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Guarantee 1 (at most once) and the active/active group: two instances of
// one account, no coordination between them, share 500 units from 16
// concurrent callers; each unit runs exactly once and each caller gets its
// own unit's output and exit code.
//
// Not parallel: it is the suite's load test, and the timing-sensitive tests
// run after it.
func TestActiveActiveRunsEveryUnitExactlyOnce(t *testing.T) {
	const units, callers = 200, 16

	a := startAutomator(t)
	cfg := withSettings(t, a.createAccount(t, "acme"), "max_concurrency: 4")
	scripts := t.TempDir()
	runs := filepath.Join(t.TempDir(), "runs.log")
	// One short line per run: an O_APPEND write of it is atomic on Linux.
	writeScript(t, scripts, "record.sh", `echo "$PROXY_WORK_ID $PROXY_INSTANCE_ID $1" >> "$2"
echo "$1"
exit $(( $1 % 7 ))`)
	pa := startProxy(t, cfg, scripts, "a")
	pb := startProxy(t, cfg, scripts, "b")
	pa.WaitPolling(t)
	pb.WaitPolling(t)

	start := time.Now()
	results := make([]result, units)
	next := make(chan int)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for i := range next {
				results[i] = a.Exec("--account", "acme", "--timeout", "60s", "record.sh", strconv.Itoa(i), runs)
			}
		})
	}
	for i := range units {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("%d units from %d callers took %v", units, callers, time.Since(start).Round(time.Millisecond))

	bad := 0
	for i, r := range results {
		if r.Code != i%7 || r.Stdout != fmt.Sprintf("%d\n", i) || r.Stderr != "" {
			if bad++; bad <= 10 {
				t.Errorf("unit %d: %v; want exit %d, stdout %q, no stderr", i, r, i%7, fmt.Sprintf("%d\n", i))
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d callers got a wrong result in all", bad)
	}

	log := lines(runs)
	if len(log) != units {
		t.Errorf("the run log has %d lines, want exactly %d (one per unit)", len(log), units)
	}
	byWork := map[string]int{}
	byInput := map[string]int{}
	byInstance := map[string]int{}
	for _, l := range log {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Errorf("malformed run log line %q", l)
			continue
		}
		byWork[f[0]]++
		byInstance[f[1]]++
		byInput[f[2]]++
	}
	for id, n := range byWork {
		if n != 1 {
			t.Errorf("work %s ran %d times, want once", id, n)
		}
	}
	for i := range units {
		if n := byInput[strconv.Itoa(i)]; n != 1 {
			t.Errorf("unit with input %d ran %d times, want once", i, n)
		}
	}
	if len(byWork) != units {
		t.Errorf("%d distinct work ids ran, want %d", len(byWork), units)
	}
	t.Logf("runs per instance: %v", byInstance)
	for id := range byInstance {
		if id != "a" && id != "b" {
			t.Errorf("a unit ran on unknown instance %q", id)
		}
	}
	if byInstance["a"] == 0 || byInstance["b"] == 0 {
		t.Errorf("both instances should have run some units; runs per instance: %v", byInstance)
	}
}
