package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercentLeavesTheHeadroomWithinItsBounds(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, MaxPercent},
		{1 * mib, 64 * mib, MaxPercent},   // 6,400 % wanted
		{8 * mib, 64 * mib, 800},          // goal 72 MiB
		{10 * mib, 64 * mib, 650},         // 640 rounded up to a step: goal 75 MiB
		{64 * mib, 64 * mib, 100},         // the default already leaves it
		{270 * mib, 64 * mib, minPercent}, // 10,000 idle connections: as without the tuner
	} {
		if got := percentFor(c.live, c.headroom); got != c.want {
			t.Errorf("percentFor(%d MiB live, %d MiB headroom) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}

// gogc reads the percentage in force without changing it.
func gogc(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// collectUntil runs collections until the tuner has set want (each
// collection queues the sentinel's finalizer, which runs on its own
// goroutine after it), or fails after 10 s.
func collectUntil(t *testing.T, tuned <-chan int, want int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		runtime.GC()
		select {
		case p := <-tuned:
			if p == want {
				return
			}
		case <-deadline:
			t.Fatalf("the tuner did not set GOGC to %d after collections (now %d)", want, gogc(t))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestGOGCFollowsTheLiveHeapAndIsRestoredOnStop(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	debug.SetGCPercent(137) // what stop must give back

	tuned := make(chan int, 100)
	stop := start(64<<20, func(p int) { tuned <- p })
	// This test's live heap is a few MiB at most: the most the tuner sets.
	collectUntil(t, tuned, MaxPercent)
	if got := gogc(t); got != MaxPercent {
		t.Fatalf("GOGC = %d with a small live heap, want %d", got, MaxPercent)
	}

	// A live heap well above the headroom is collected as by default.
	big := make([][]byte, 256)
	for i := range big {
		big[i] = make([]byte, 1<<20)
	}
	collectUntil(t, tuned, minPercent)
	if got := gogc(t); got != minPercent {
		t.Fatalf("GOGC = %d with 256 MiB live, want %d", got, minPercent)
	}
	runtime.KeepAlive(big)

	stop()
	stop()
	if got := gogc(t); got != 137 {
		t.Fatalf("GOGC = %d after stop, want the 137 it was before start", got)
	}
	big = nil
	// The sentinel armed before stop is found by the next collection;
	// its finalizer has run once two of the test's own have run after it.
	for range 2 {
		awaitFinalizers(t)
	}
	select {
	case p := <-tuned:
		t.Fatalf("the tuner set GOGC to %d after it was stopped", p)
	default:
	}
	if got := gogc(t); got != 137 {
		t.Fatalf("GOGC = %d after collections that followed stop, want 137", got)
	}
}

// awaitFinalizers runs a collection and waits until the finalizers it
// queued have run, as the runtime runs them one after another on one
// goroutine.
func awaitFinalizers(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) { close(done) })
	runtime.GC()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a finalizer did not run within 10 s of a collection")
	}
}

func TestAnOperatorsGOGCIsLeftAlone(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	debug.SetGCPercent(50)
	t.Setenv("GOGC", "50")
	stop := Start()
	defer stop()
	for range 3 {
		runtime.GC()
	}
	if got := gogc(t); got != 50 {
		t.Fatalf("GOGC = %d with GOGC=50 in the environment, want 50", got)
	}
}
