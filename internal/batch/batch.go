// Package batch runs what many goroutines hand in, in batches, one batch at
// a time: the pattern of a group commit.
//
// A caller that finds no batch on its way runs its item at once, on its own
// goroutine: a lone item waits for nothing and costs no hand-over between
// goroutines. Items handed in while a batch is on its way wait for it. When
// it is done, the oldest of them is made the next leader: its caller runs,
// on its own goroutine, every item waiting by then (oldest first, within the
// group's bounds), and so on, until the last leader finds nothing waiting
// and leaves the turn free. Under load the batches grow by themselves.
//
// The SQLite store commits its writes this way, the PostgreSQL store its
// writes and reads of single units, and the proxy posts its results.
package batch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Group gathers the items handed to Do into batches and runs them with Run,
// one batch at a time. Set the fields before the first Do; a Group must not
// be copied after that.
type Group[T any] struct {
	// Run runs one batch (at least one item, oldest first) and returns the
	// outcome of each item, in order. It is called on the goroutine of the
	// batch's leader, never for two batches at once.
	Run func(items []T) []error
	// MaxItems bounds the items of one batch; 0 is no bound.
	MaxItems int
	// Size and MaxSize, when both set, bound the sum of a batch's sizes;
	// an item larger than MaxSize goes alone.
	Size    func(T) int
	MaxSize int
	// Detach makes a caller whose context ends after its item was taken
	// into a batch return the context's error at once. Without it, the
	// caller waits for the item's outcome and returns that: an item taken
	// runs, and only its outcome says whether it took effect. Either way
	// the caller that leads a batch runs it to its end.
	Detach bool

	mu      sync.Mutex
	hook    func(waiting int) // see WaitingReaches
	queue   []*entry[T]       // waiting, oldest first
	leading bool              // a batch is on its way
	closed  error             // set by Close: what Do returns
	drained chan struct{}     // made by Close, closed when the turn is left free

	batches, items, busy atomic.Int64 // see Stats
}

// Stats counts what a Group ran since it was made.
type Stats struct {
	Batches int64         // batches run
	Items   int64         // items run in them: Items/Batches is the mean batch
	Busy    time.Duration // time spent in Run: over an interval, how much of it the one lane was taken
}

// Stats returns the counts so far; take two and subtract for an interval.
func (g *Group[T]) Stats() Stats {
	return Stats{Batches: g.batches.Load(), Items: g.items.Load(), Busy: time.Duration(g.busy.Load())}
}

// An item's life: queued until a leader takes it, or abandoned by a caller
// whose context ended first (it is then never run), or made the next
// leader (its caller then runs the next batch, its own item first).
const (
	queued int32 = iota
	taken
	abandoned
	leading
)

type entry[T any] struct {
	item  T
	state atomic.Int32
	done  chan error    // capacity 1: the outcome
	lead  chan struct{} // capacity 1: lead the next batch; nil for a leader at once
}

// Do hands item in, and returns its outcome once the batch that holds it
// has run. When ctx ends while the item still waits, the item is never run
// and Do returns ctx's error; once the item was taken into a batch, see
// Detach. After Close, Do runs nothing and returns Close's error.
func (g *Group[T]) Do(ctx context.Context, item T) error {
	e := &entry[T]{item: item, done: make(chan error, 1)}
	g.mu.Lock()
	if g.closed != nil {
		err := g.closed
		g.mu.Unlock()
		return err
	}
	if !g.leading {
		g.leading = true
		if g.hook != nil {
			g.hook(0)
		}
		g.mu.Unlock()
		e.state.Store(taken)
		g.lead(e)
		return <-e.done
	}
	e.lead = make(chan struct{}, 1)
	g.queue = append(g.queue, e)
	if g.hook != nil {
		g.hook(len(g.queue))
	}
	g.mu.Unlock()

	ctxDone := ctx.Done()
	for {
		select {
		case err := <-e.done:
			return err
		case <-e.lead:
			g.lead(nil)
			return <-e.done
		case <-ctxDone:
			if e.state.CompareAndSwap(queued, abandoned) {
				return ctx.Err() // the leader that reaches it skips it
			}
			if !g.Detach {
				ctxDone = nil // taken, or made the next leader: it runs
				continue
			}
			if e.state.Load() == leading {
				// Made the next leader meanwhile: the others wait for
				// this goroutine to run their batch.
				<-e.lead
				g.lead(nil)
			}
			return ctx.Err()
		}
	}
}

// lead runs one batch: own (a leader at once) or the oldest entry waiting
// (a leader by hand-over, which is queue[0]), with the entries waiting
// behind it, within the bounds. Then it hands the lead to the oldest entry
// still waiting, or leaves it free.
func (g *Group[T]) lead(own *entry[T]) {
	g.mu.Lock()
	batch := g.take(own)
	g.mu.Unlock()
	if len(batch) > 0 {
		items := make([]T, len(batch))
		for i, e := range batch {
			items[i] = e.item
		}
		start := time.Now()
		errs := g.Run(items)
		g.busy.Add(int64(time.Since(start)))
		g.batches.Add(1)
		g.items.Add(int64(len(items)))
		if len(errs) != len(batch) {
			panic(fmt.Sprintf("batch: Run returned %d outcomes for %d items", len(errs), len(batch)))
		}
		for i, e := range batch {
			e.done <- errs[i]
		}
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.queue) > 0 {
		next := g.queue[0]
		if next.state.CompareAndSwap(queued, leading) {
			next.lead <- struct{}{}
			return
		}
		g.queue[0] = nil
		g.queue = g.queue[1:] // abandoned by its caller
	}
	g.leading = false
	if g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

// take removes the next batch's entries from the queue and marks them
// taken; entries abandoned meanwhile are dropped on the way. Called with
// g.mu held.
func (g *Group[T]) take(own *entry[T]) []*entry[T] {
	var batch []*entry[T]
	size := 0
	if own != nil {
		batch = append(batch, own)
		size = g.size(own.item)
	}
	n := 0
	for _, e := range g.queue {
		if g.MaxItems > 0 && len(batch) == g.MaxItems {
			break
		}
		s := g.size(e.item)
		if len(batch) > 0 && g.MaxSize > 0 && size+s > g.MaxSize {
			break
		}
		n++
		if e.state.CompareAndSwap(queued, taken) || e.state.CompareAndSwap(leading, taken) {
			batch = append(batch, e)
			size += s
		}
	}
	clear(g.queue[:n])
	g.queue = g.queue[n:]
	return batch
}

func (g *Group[T]) size(item T) int {
	if g.Size == nil || g.MaxSize <= 0 {
		return 0
	}
	return g.Size(item)
}

// Close lets the items handed in already run, and returns once no batch is
// on its way. From then on Do returns err (which must not be nil) and runs
// nothing.
func (g *Group[T]) Close(err error) {
	if err == nil {
		panic("batch: Close(nil)")
	}
	g.mu.Lock()
	g.closed = err
	if !g.leading {
		g.mu.Unlock()
		return
	}
	if g.drained == nil {
		g.drained = make(chan struct{})
	}
	drained := g.drained
	g.mu.Unlock()
	<-drained
}

// Waiting is the number of items waiting for the batch on its way,
// abandoned ones not yet passed over included.
func (g *Group[T]) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// Idle reports whether no batch is on its way and nothing waits.
func (g *Group[T]) Idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.leading && len(g.queue) == 0
}

// WaitingReaches returns a channel closed the first time an item handed in
// finds n items waiting, its own included; with n = 0, the first time an
// item leads a batch at once, before it has taken that batch (an item
// handed in just then may still join it). For tests: it replaces the
// previous one.
func (g *Group[T]) WaitingReaches(n int) <-chan struct{} {
	reached := make(chan struct{})
	var once sync.Once
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hook = func(waiting int) {
		if waiting == n {
			once.Do(func() { close(reached) })
		}
	}
	return reached
}

// Closed reports whether Close was called.
func (g *Group[T]) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed != nil
}
