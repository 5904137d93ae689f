package batch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/waittest"
)

// recorder is a Run that records each batch and answers item i with
// outcome(i). The first batch can be held until release.
type recorder struct {
	mu      sync.Mutex
	batches [][]int

	hold    chan struct{} // nil: hold nothing
	held    chan struct{} // closed once the first batch is being held
	outcome func(item int) error
}

func newRecorder(hold bool) *recorder {
	r := &recorder{held: make(chan struct{}), outcome: func(int) error { return nil }}
	if hold {
		r.hold = make(chan struct{})
	}
	return r
}

func (r *recorder) run(items []int) []error {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(items))
	first := len(r.batches) == 1
	r.mu.Unlock()
	if first && r.hold != nil {
		close(r.held)
		<-r.hold
	}
	errs := make([]error, len(items))
	for i, item := range items {
		errs[i] = r.outcome(item)
	}
	return errs
}

func (r *recorder) release() { close(r.hold) }

func (r *recorder) got() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// outcome waits for a Do's outcome on out, and fails t if it does not
// come within 10 s (a lost turn to lead would leave it waiting for ever).
func outcome(t *testing.T, out <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-out:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for the outcome of %s", what)
		return nil
	}
}

// do calls g.Do(ctx, item) and returns its outcome, failing t if it does
// not return within 10 s.
func do(t *testing.T, g *Group[int], ctx context.Context, item int) error {
	t.Helper()
	out := make(chan error, 1)
	go func() { out <- g.Do(ctx, item) }()
	return outcome(t, out, fmt.Sprintf("Do(%d)", item))
}

// holdFirst hands in item 0 and returns once its batch is being held; done
// receives its outcome.
func holdFirst(t *testing.T, g *Group[int], r *recorder) (done <-chan error) {
	t.Helper()
	out := make(chan error, 1)
	go func() { out <- g.Do(context.Background(), 0) }()
	waittest.Recv(t, r.held, "the first batch to run")
	return out
}

// handIn hands items in, each on a goroutine of its own, in order (each
// waits before the next is handed in), and returns their outcomes by item.
func handIn(t *testing.T, g *Group[int], ctxs map[int]context.Context, items ...int) map[int]<-chan error {
	t.Helper()
	outs := map[int]<-chan error{}
	for i, item := range items {
		out := make(chan error, 1)
		outs[item] = out
		ctx := ctxs[item]
		if ctx == nil {
			ctx = context.Background()
		}
		queued := g.WaitingReaches(i + 1)
		go func() { out <- g.Do(ctx, item) }()
		waittest.Recv(t, queued, fmt.Sprintf("item %d to wait", item))
	}
	return outs
}

func TestALoneItemRunsAtOnceWithItsOutcome(t *testing.T) {
	r := newRecorder(false)
	errOdd := errors.New("odd")
	r.outcome = func(item int) error {
		if item%2 == 1 {
			return errOdd
		}
		return nil
	}
	g := &Group[int]{Run: r.run}
	if err := do(t, g, context.Background(), 2); err != nil {
		t.Errorf("Do(2) = %v, want nil", err)
	}
	if err := do(t, g, context.Background(), 3); !errors.Is(err, errOdd) {
		t.Errorf("Do(3) = %v, want %v", err, errOdd)
	}
	if got := r.got(); !slices.EqualFunc(got, [][]int{{2}, {3}}, slices.Equal) {
		t.Errorf("batches %v, want [[2] [3]]", got)
	}
	if !g.Idle() {
		t.Error("the group is not idle after its items ran")
	}
}

// TestItemsHandedInDuringABatchRunTogether: the items that wait for a batch
// run as the next one, oldest first, and each gets its own outcome.
func TestItemsHandedInDuringABatchRunTogether(t *testing.T) {
	r := newRecorder(true)
	r.outcome = func(item int) error { return fmt.Errorf("outcome %d", item) }
	g := &Group[int]{Run: r.run}
	first := holdFirst(t, g, r)
	outs := handIn(t, g, nil, 1, 2, 3, 4, 5)
	r.release()
	if err := outcome(t, first, "item 0"); err == nil || err.Error() != "outcome 0" {
		t.Errorf("item 0: %v, want outcome 0", err)
	}
	for item, out := range outs {
		if err := outcome(t, out, fmt.Sprintf("item %d", item)); err == nil || err.Error() != fmt.Sprintf("outcome %d", item) {
			t.Errorf("item %d: %v, want outcome %d", item, err, item)
		}
	}
	if got := r.got(); !slices.EqualFunc(got, [][]int{{0}, {1, 2, 3, 4, 5}}, slices.Equal) {
		t.Errorf("batches %v, want [[0] [1 2 3 4 5]]", got)
	}
}

// TestAnItemGivenUpWhileWaitingNeverRuns: its caller returns at once with
// its context's error, and the next batch goes without it, even when it was
// the oldest waiting (the one that would have led).
func TestAnItemGivenUpWhileWaitingNeverRuns(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) {
			r := newRecorder(true)
			g := &Group[int]{Run: r.run, Detach: detach}
			first := holdFirst(t, g, r)
			ctx1, cancel1 := context.WithCancel(context.Background())
			ctx3, cancel3 := context.WithCancel(context.Background())
			outs := handIn(t, g, map[int]context.Context{1: ctx1, 3: ctx3}, 1, 2, 3, 4)
			cancel1()
			cancel3()
			for _, item := range []int{1, 3} {
				select {
				case err := <-outs[item]:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("item %d given up: %v, want context.Canceled", item, err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("item %d given up did not return while the batch was held", item)
				}
			}
			r.release()
			for _, out := range []<-chan error{first, outs[2], outs[4]} {
				if err := outcome(t, out, "an item not given up"); err != nil {
					t.Error(err)
				}
			}
			if got := r.got(); !slices.EqualFunc(got, [][]int{{0}, {2, 4}}, slices.Equal) {
				t.Errorf("batches %v, want [[0] [2 4]]", got)
			}
			if !g.Idle() {
				t.Error("the group is not idle after its items ran")
			}
		})
	}
}

// TestATakenItemRunsWhateverItsCaller: an item whose caller gives up after
// it was taken into a batch that another caller leads runs; without Detach
// its caller waits for the outcome and returns it, with Detach it returns
// at once. (A leader's own caller runs its batch, so it cannot give up.)
func TestATakenItemRunsWhateverItsCaller(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) {
			r := newRecorder(false)
			inside := []chan struct{}{make(chan struct{}), make(chan struct{})}
			hold := []chan struct{}{make(chan struct{}), make(chan struct{})}
			var calls atomic.Int32
			errRan := errors.New("ran")
			g := &Group[int]{Detach: detach, Run: func(items []int) []error {
				if k := calls.Add(1) - 1; k < 2 {
					close(inside[k])
					<-hold[k]
				}
				r.run(items)
				errs := make([]error, len(items))
				for i := range errs {
					errs[i] = errRan
				}
				return errs
			}}
			first := make(chan error, 1)
			go func() { first <- g.Do(context.Background(), 0) }()
			waittest.Recv(t, inside[0], "the first batch to run")
			ctx, cancel := context.WithCancel(context.Background())
			outs := handIn(t, g, map[int]context.Context{2: ctx}, 1, 2)
			close(hold[0])
			waittest.Recv(t, inside[1], "the second batch to run")
			cancel()
			if detach {
				select {
				case err := <-outs[2]:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("Do(2) = %v, want context.Canceled", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a detached caller did not return while its batch ran")
				}
				close(hold[1])
			} else {
				select {
				case err := <-outs[2]:
					t.Fatalf("Do(2) returned %v while its item was running", err)
				default:
				}
				close(hold[1])
				if err := outcome(t, outs[2], "item 2"); !errors.Is(err, errRan) {
					t.Errorf("Do(2) = %v, want its outcome %v", err, errRan)
				}
			}
			for _, out := range []<-chan error{first, outs[1]} {
				if err := outcome(t, out, "a leader"); !errors.Is(err, errRan) {
					t.Errorf("Do = %v, want %v", err, errRan)
				}
			}
			if got := r.got(); !slices.EqualFunc(got, [][]int{{0}, {1, 2}}, slices.Equal) {
				t.Errorf("batches %v, want [[0] [1 2]]", got)
			}
			if !g.Idle() {
				t.Error("the group is not idle after its leaders returned")
			}
		})
	}
}

// TestBatchesKeepTheirBounds: MaxItems, and MaxSize with an item larger
// than it going alone.
func TestBatchesKeepTheirBounds(t *testing.T) {
	t.Run("items", func(t *testing.T) {
		r := newRecorder(true)
		g := &Group[int]{Run: r.run, MaxItems: 3}
		first := holdFirst(t, g, r)
		outs := handIn(t, g, nil, 1, 2, 3, 4, 5, 6, 7)
		r.release()
		outcome(t, first, "item 0")
		for item, out := range outs {
			outcome(t, out, fmt.Sprintf("item %d", item))
		}
		if got := r.got(); !slices.EqualFunc(got, [][]int{{0}, {1, 2, 3}, {4, 5, 6}, {7}}, slices.Equal) {
			t.Errorf("batches %v, want [[0] [1 2 3] [4 5 6] [7]]", got)
		}
	})
	t.Run("size", func(t *testing.T) {
		r := newRecorder(true)
		// An item's size is its value; 100 is larger than MaxSize.
		g := &Group[int]{Run: r.run, Size: func(item int) int { return item }, MaxSize: 10}
		first := holdFirst(t, g, r)
		outs := handIn(t, g, nil, 4, 5, 2, 100, 3, 6)
		r.release()
		outcome(t, first, "item 0")
		for item, out := range outs {
			outcome(t, out, fmt.Sprintf("item %d", item))
		}
		if got := r.got(); !slices.EqualFunc(got, [][]int{{0}, {4, 5}, {2}, {100}, {3, 6}}, slices.Equal) {
			t.Errorf("batches %v, want [[0] [4 5] [2] [100] [3 6]]", got)
		}
	})
}

// TestCloseLetsWaitingItemsRunThenRefuses: Close returns once the items
// handed in before it ran; Do after it runs nothing.
func TestCloseLetsWaitingItemsRunThenRefuses(t *testing.T) {
	r := newRecorder(true)
	g := &Group[int]{Run: r.run}
	first := holdFirst(t, g, r)
	outs := handIn(t, g, nil, 1, 2)
	errClosed := errors.New("closed for the test")
	closed := make(chan struct{})
	go func() {
		g.Close(errClosed)
		close(closed)
	}()
	waittest.Until(t, "Close to close the group", g.Closed)
	if err := do(t, g, context.Background(), 3); !errors.Is(err, errClosed) {
		t.Errorf("Do after Close = %v, want %v", err, errClosed)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was on its way")
	default:
	}
	r.release()
	waittest.Recv(t, closed, "Close to return")
	for _, out := range []<-chan error{first, outs[1], outs[2]} {
		if err := outcome(t, out, "an item handed in before Close"); err != nil {
			t.Error(err)
		}
	}
	if got := r.got(); !slices.EqualFunc(got, [][]int{{0}, {1, 2}}, slices.Equal) {
		t.Errorf("batches %v, want [[0] [1 2]]", got)
	}
}

// TestManyItemsWithCallersGivingUpAllEnd: thousands of items at once, every
// fifth caller giving up at a random moment, batches taking a random time:
// every Do returns; no item runs twice; an item whose Do succeeded ran, and
// (without Detach) one whose caller got its context's error did not; the
// group is left idle with nothing waiting (no item stuck, no lost turn).
func TestManyItemsWithCallersGivingUpAllEnd(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) {
			const n = 4000
			var runs [n]atomic.Int32
			g := &Group[int]{Detach: detach, MaxItems: 50, Run: func(items []int) []error {
				for _, item := range items {
					runs[item].Add(1)
				}
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				return make([]error, len(items))
			}}
			var gaveUp [n]bool
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					if i%5 == 0 {
						go func() { time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond); cancel() }()
					}
					err := g.Do(ctx, i)
					switch {
					case err == nil:
					case errors.Is(err, context.Canceled):
						gaveUp[i] = true
					default:
						t.Errorf("item %d: %v", i, err)
					}
				})
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			waittest.Recv(t, done, "every Do to return")
			if !g.Idle() {
				t.Fatalf("after every Do returned: not idle, %d waiting", g.Waiting())
			}
			for i := range n {
				switch got := runs[i].Load(); {
				case got > 1:
					t.Errorf("item %d ran %d times", i, got)
				case !gaveUp[i] && got != 1:
					t.Errorf("item %d succeeded but ran %d times", i, got)
				case gaveUp[i] && !detach && got != 0:
					t.Errorf("item %d's caller got its context's error, but it ran", i)
				}
			}
		})
	}
}

// TestStatsCountBatchesItemsAndTimeInRun: Stats counts each batch run and
// its items, and the time spent in Run, which covers at least the time the
// test held the first batch and at most the test's whole time.
func TestStatsCountBatchesItemsAndTimeInRun(t *testing.T) {
	began := time.Now()
	r := newRecorder(true)
	g := &Group[int]{Run: r.run}
	if s := g.Stats(); s != (Stats{}) {
		t.Fatalf("a new group's stats are %+v, want zero", s)
	}
	first := holdFirst(t, g, r)
	heldSince := time.Now()
	outs := handIn(t, g, nil, 1, 2, 3)
	held := time.Since(heldSince)
	r.release()
	if err := outcome(t, first, "item 0"); err != nil {
		t.Fatal(err)
	}
	for item, out := range outs {
		if err := outcome(t, out, fmt.Sprintf("item %d", item)); err != nil {
			t.Fatal(err)
		}
	}
	if err := do(t, g, context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	s := g.Stats()
	if s.Batches != 3 || s.Items != 5 {
		t.Errorf("stats count %d batches of %d items in all, want 3 batches ([0] [1 2 3] [4]) of 5", s.Batches, s.Items)
	}
	if total := time.Since(began); s.Busy < held || s.Busy > total {
		t.Errorf("busy %v, want between the %v the first batch was held and the test's %v", s.Busy, held, total)
	}
}
