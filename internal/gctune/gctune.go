// Package gctune keeps the garbage collector's heap goal at least a fixed
// headroom above the live heap, for a server whose live heap is small while
// it allocates fast.
//
// With the runtime's default (GOGC=100) the collector runs each time the
// heap has grown by as much as survived the last collection. An automator
// serving units at full speed keeps a few MiB live and allocates tens of
// MiB a second, so it collected many times a second, each time marking the
// same few MiB and stopping every goroutine twice. The same automator
// holding 10,000 idle proxy connections keeps hundreds of MiB live, and
// there GOGC=100 is right: a higher GOGC would double its memory.
//
// So after each collection the tuner sets GOGC to what leaves Headroom
// bytes between the live heap and the next collection, never below 100
// (the default: a large live heap is collected as it would be without the
// tuner) and never above MaxPercent. The cost is at most Headroom more
// heap while the live heap is small. An operator's GOGC in the environment
// wins: the tuner then does nothing.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

const (
	// Headroom is the least the heap may grow between two collections.
	Headroom = 64 << 20
	// MaxPercent bounds GOGC while the live heap is tiny (just started).
	MaxPercent = 1000
	// minPercent is the runtime's default, kept for a large live heap.
	minPercent = 100
)

// liveHeap is the runtime metric of the heap marked live by the last
// collection.
const liveHeap = "/gc/heap/live:bytes"

// Start tunes GOGC after every collection from now on, unless the
// environment sets GOGC. stop ends the tuning and gives the collector back
// the percentage it had before Start; it may be called more than once.
func Start() (stop func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	return start(Headroom, nil)
}

// tuner is the state the sentinel's finalizer runs on.
type tuner struct {
	headroom uint64
	// tuned, when not nil, is told each percentage set (tests).
	tuned func(percent int)

	mu      sync.Mutex
	stopped bool
	percent int
	sample  []metrics.Sample
}

// sentinel is an object kept by nothing, whose finalizer therefore runs
// after each collection; it holds a pointer so the runtime does not give
// it a tiny-allocator slot shared with other objects, which could keep it
// alive past a collection.
type sentinel struct{ t *tuner }

func start(headroom uint64, tuned func(int)) (stop func()) {
	t := &tuner{headroom: headroom, tuned: tuned, sample: []metrics.Sample{{Name: liveHeap}}}
	before := debug.SetGCPercent(minPercent)
	t.percent = minPercent
	t.arm()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			t.stopped = true
			t.mu.Unlock()
			debug.SetGCPercent(before)
		})
	}
}

// arm leaves a new sentinel for the next collection to find unreachable.
func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{t: t}, func(s *sentinel) { s.t.collected() })
}

// collected runs on the runtime's finalizer goroutine after a collection:
// it sets GOGC for the next one and arms again.
func (t *tuner) collected() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		if p := percentFor(t.sample[0].Value.Uint64(), t.headroom); p != t.percent {
			debug.SetGCPercent(p)
			t.percent = p
			if t.tuned != nil {
				t.tuned(p)
			}
		}
	}
	t.arm()
}

// percentFor is the GOGC that puts the next collection headroom bytes
// above a live heap of live bytes, within [minPercent, MaxPercent], in
// steps of 50 so that a live heap moving by a few bytes does not reset it
// after every collection.
func percentFor(live, headroom uint64) int {
	if live == 0 {
		return MaxPercent
	}
	p := (headroom*100/live + 49) / 50 * 50
	return int(max(minPercent, min(p, MaxPercent)))
}
