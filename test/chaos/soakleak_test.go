//go:build linux

package chaos

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
)

// soakHelperEnv, in the environment of this test binary, makes it the
// helper process of TestSoakVerdictFailsARealLeakAndPassesASteadyProcess
// instead of running tests (TestMain): "leak" holds on to what it takes,
// "steady" gives it back.
const soakHelperEnv = "CHAOS_SOAK_HELPER"

// The helper's pace: each reading of its Prometheus page (the sampler's,
// one per sample) is answered after soakHelperSteps steps. At each step the
// leaking one keeps 3 MiB more of heap (touched, so resident), one more open
// file and one more goroutine; the steady one takes as much and gives it
// back at once.
// Paced by the readings rather than by a clock, the leak between two
// windows of samples follows the readings however little CPU a loaded
// machine leaves the helper (paced by a 50 ms ticker, it once leaked a
// fifth of what the test needs while make test ran beside a soak).
const (
	soakHelperSteps = 2
	soakHelperBytes = 3 << 20
)

// soakHelperHeld is what the leaking helper holds on to: reachable, so that
// the collector frees none of it and no finalizer closes the files.
var soakHelperHeld struct {
	bufs  [][]byte
	files []*os.File
}

// soakHelper is the helper process: it serves, like the automator, a
// Prometheus page with its goroutines and heap, says where on stdout, then
// leaks or holds steady until it is killed.
func soakHelper(mode string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("soak helper:", err)
		return 1
	}
	block := make(chan struct{})
	take := func() ([]byte, *os.File, error) {
		b := make([]byte, soakHelperBytes)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		f, err := os.Open(os.DevNull)
		return b, f, err
	}
	// step takes what one reading is due, before the reading is answered:
	// every reading of the page is one step, however late.
	var mu sync.Mutex
	step := func() error {
		mu.Lock()
		defer mu.Unlock()
		for range soakHelperSteps {
			b, f, err := take()
			if err != nil {
				return err
			}
			if mode != "leak" {
				f.Close()
				done := make(chan struct{})
				go func() { <-done }()
				close(done)
				continue
			}
			soakHelperHeld.bufs, soakHelperHeld.files = append(soakHelperHeld.bufs, b), append(soakHelperHeld.files, f)
			go func() { <-block }()
		}
		return nil
	}
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	failed := make(chan error, 1)
	http.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		if err := step(); err != nil {
			failed <- err
			return
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		metrics.Read(gogc)
		fmt.Fprintf(w, "go_goroutines %d\ngo_memstats_heap_inuse_bytes %d\ngo_memstats_next_gc_bytes %d\ngo_gc_gogc_percent %d\n",
			runtime.NumGoroutine(), ms.HeapInuse, ms.NextGC, gogc[0].Value.Uint64())
	})
	go func() { _ = http.Serve(ln, nil) }()
	fmt.Printf("soak helper (%s) serves http://%s/metrics\n", mode, ln.Addr())
	fmt.Println("soak helper:", <-failed)
	return 1
}

// The sampler and the verdict of the soak, on real processes: a helper that
// leaks memory, open files and goroutines at every reading fails
// the verdict on each, named; one that takes as much and gives it back
// (its heap a garbage collector's sawtooth) passes. Both are read by the
// soak's own sampler, from /proc and from their Prometheus pages, and
// judged with the allowances the soak gives the automator.
func TestSoakVerdictFailsARealLeakAndPassesASteadyProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs helper processes for a few seconds; skipped in -short mode")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var targets []SoakTarget
	for _, mode := range []string{"leak", "steady"} {
		p, err := startProc(t, "helper-"+mode, filepath.Join(dir, mode+".log"), map[string]string{soakHelperEnv: mode}, exe)
		if err != nil {
			t.Fatal(err)
		}
		mustAwait(t, p, p.Seen("serves http://"), 30*time.Second, "the "+mode+" helper to serve")
		_, url, _ := strings.Cut(p.Log(), "serves ")
		targets = append(targets, SoakTarget{Name: mode, Role: RoleAutomator, PID: p.PID, MetricsURL: strings.TrimSpace(url)})
	}

	// 40 readings 100 ms apart, for 4 s or longer: about 10 readings in
	// each quarter compared, however slowly a loaded machine lets them
	// come (a fixed 4 s once left 6, too few to judge). The quarters are
	// of the time the readings took.
	const readings, every = 40, 100 * time.Millisecond
	var csv strings.Builder
	s := NewSoakSampler(targets, nil, &csv)
	for range readings {
		s.Sample()
		time.Sleep(every) // the pace of the readings, not a wait for anything
	}
	if errs := s.Errors(); len(errs) > 0 {
		t.Fatalf("readings failed: %v", errs)
	}
	r := SoakVerdict(s.Series(), SoakOptions{Allow: DefaultSoakAllowances()})
	t.Logf("%d samples\n%s", s.Samples(), r.Table())

	failed := map[string]bool{}
	for _, f := range r.Failed() {
		if f.Process != "leak" {
			t.Errorf("the steady helper failed: %s", f.Detail)
		}
		failed[f.Resource] = true
	}
	for _, res := range []string{ResRSS, ResFDs, ResGoroutines, ResHeapLive} {
		if !failed[res] {
			t.Errorf("the leaking helper passed on %s", res)
		}
	}
	err = r.Err()
	if err == nil {
		t.Fatal("the verdict passed a process that leaks")
	}
	for _, want := range []string{"leak rss_bytes grew from", "leak open_fds grew from", "leak goroutines grew from", "allowed +"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the verdict's failure does not say %q:\n%v", want, err)
		}
	}
	if n := strings.Count(csv.String(), "\n"); n < 1+readings*2*3 {
		t.Errorf("the samples' CSV holds %d lines, want a header and %d readings of at least 3 resources of 2 processes", n, readings)
	}
}
