package server

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// seenCounter counts the writes of instances' polls, and fails the next
// batch when told to.
type seenCounter struct {
	store.Store
	mu        sync.Mutex
	single    int                          // InstanceSeen calls
	batches   [][]store.InstanceSeenParams // InstancesSeen calls
	failBatch bool
}

func (c *seenCounter) InstanceSeen(ctx context.Context, p store.InstanceSeenParams) error {
	c.mu.Lock()
	c.single++
	c.mu.Unlock()
	return c.Store.InstanceSeen(ctx, p)
}

func (c *seenCounter) InstancesSeen(ctx context.Context, ps []store.InstanceSeenParams) ([]store.InstanceSeenParams, error) {
	c.mu.Lock()
	fail := c.failBatch
	c.failBatch = false
	c.batches = append(c.batches, ps)
	c.mu.Unlock()
	if fail {
		return nil, errors.New("injected failure")
	}
	return c.Store.InstancesSeen(ctx, ps)
}

func (c *seenCounter) counts() (single, batches int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.single, len(c.batches)
}

type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type seenEnv struct {
	t     *testing.T
	st    *seenCounter
	srv   *Server
	clock *stepClock
}

// openStepStore opens a SQLite store for t holding the accounts named, and
// a clock that moves only when told.
func openStepStore(t *testing.T, accounts ...string) (*sqlitestore.Store, *stepClock) {
	t.Helper()
	ctx := t.Context()
	sq, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	clock := &stepClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	for _, name := range accounts {
		if _, err := sq.AccountCreate(ctx, store.AccountCreateParams{Name: name, TokenHash: []byte("t-" + name), KeyID: 1, SealedKey: []byte("k"), Now: clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return sq, clock
}

func newSeenEnv(t *testing.T) *seenEnv {
	t.Helper()
	sq, clock := openStepStore(t, "acme")
	st := &seenCounter{Store: sq}
	srv, err := New(Options{Store: st, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return &seenEnv{t: t, st: st, srv: srv, clock: clock}
}

// poll makes one poll that returns at once (no wait, no claim).
func (e *seenEnv) poll(id, version string, running int) {
	e.t.Helper()
	req := &automatorv1.PollRequest{InstanceId: id, Hostname: id + ".example", Version: version, Wait: durationpb.New(0)}
	for range running {
		req.Running = append(req.Running, newID("w_"))
	}
	ctx := context.WithValue(e.t.Context(), keyAccount, "acme")
	if _, err := e.srv.ProxyService().Poll(ctx, req); err != nil {
		e.t.Fatalf("Poll(%s): %v", id, err)
	}
}

// want checks the stored record of instance id. (What the polls said they
// ran is stored but not listed: an instance's in flight is counted from
// its claimed units, and these polls claim none.)
func (e *seenEnv) want(id, version string, lastPoll time.Time) {
	e.t.Helper()
	list, err := e.st.Store.InstanceList(e.t.Context(), "acme")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, in := range list {
		if in.InstanceID == id {
			if in.Version != version || !in.LastPollAt.Equal(lastPoll) || in.InFlight != 0 {
				e.t.Errorf("stored %s: version %s, last poll %v, in flight %d; want %s, %v, 0",
					id, in.Version, in.LastPollAt, in.InFlight, version, lastPoll)
			}
			return
		}
	}
	e.t.Errorf("instance %s is not stored (stored: %+v)", id, list)
}

func (e *seenEnv) wantCounts(single, batches int) {
	e.t.Helper()
	if s, b := e.st.counts(); s != single || b != batches {
		e.t.Errorf("store saw %d InstanceSeen and %d InstancesSeen calls, want %d and %d", s, b, single, batches)
	}
}

func (e *seenEnv) batching() {
	e.srv.seen.mu.Lock()
	e.srv.seen.batching = true
	e.srv.seen.mu.Unlock()
}

// TestKnownInstancesPollsAreWrittenInBatches: while polls are batched, an
// instance's first poll is stored at once, later polls only in memory until
// a flush writes the latest of each instance in one call; a changed
// version is stored at once; a failed flush is retried by the next.
func TestKnownInstancesPollsAreWrittenInBatches(t *testing.T) {
	t.Parallel()
	e := newSeenEnv(t)
	e.batching()
	t0 := e.clock.Now()

	e.poll("a", "v1", 0)
	e.want("a", "v1", t0) // listed right after its first poll
	e.wantCounts(1, 0)

	for i := 1; i <= 10; i++ {
		e.clock.add(30 * time.Second)
		e.poll("a", "v1", i%3)
	}
	tA := e.clock.Now()
	e.poll("b", "v1", 0) // a new instance: at once
	e.wantCounts(2, 0)
	e.want("a", "v1", t0) // not written per poll

	if err := e.srv.FlushInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantCounts(2, 1)
	e.want("a", "v1", tA)
	e.want("b", "v1", tA)
	if got := len(e.st.batches[0]); got != 1 {
		t.Errorf("the flush wrote %d polls, want 1 (only a changed since it was written)", got)
	}
	// Nothing changed: a flush writes nothing.
	if err := e.srv.FlushInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantCounts(2, 1)

	// A new version is written at once, and nothing is left to flush.
	e.clock.add(time.Second)
	e.poll("a", "v2", 0)
	e.want("a", "v2", e.clock.Now())
	e.wantCounts(3, 1)
	if err := e.srv.FlushInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantCounts(3, 1)

	// A failed flush keeps its polls for the next one.
	e.clock.add(time.Second)
	e.poll("a", "v2", 1)
	e.poll("b", "v1", 2)
	e.st.mu.Lock()
	e.st.failBatch = true
	e.st.mu.Unlock()
	if err := e.srv.FlushInstances(t.Context()); err == nil {
		t.Fatal("FlushInstances succeeded through a failing store")
	}
	e.want("b", "v1", tA)
	if err := e.srv.FlushInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantCounts(3, 3)
	e.want("a", "v2", e.clock.Now())
	e.want("b", "v1", e.clock.Now())
}

// TestRecordInstancesWritesWhatIsLeftWhenItStops: the polls kept in memory
// are written when RecordInstances ends, and after that polls are written
// as they come (at most one per instance every seenEvery).
func TestRecordInstancesWritesWhatIsLeftWhenItStops(t *testing.T) {
	t.Parallel()
	e := newSeenEnv(t)
	e.poll("a", "v1", 0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { e.srv.RecordInstances(ctx); close(done) }()
	for range 5 {
		e.clock.add(30 * time.Second)
		e.poll("a", "v1", 1)
	}
	cancel()
	waittest.Recv(t, done, "RecordInstances to return after its context was cancelled")
	e.want("a", "v1", e.clock.Now())

	// Without the recorder: a poll seenEvery after the stored one is
	// written, one sooner is not.
	single, _ := e.st.counts()
	e.clock.add(seenEvery)
	e.poll("a", "v1", 2)
	e.want("a", "v1", e.clock.Now())
	e.clock.add(seenEvery / 2)
	e.poll("a", "v1", 3)
	e.want("a", "v1", e.clock.Now().Add(-seenEvery/2))
	if s, _ := e.st.counts(); s != single+1 {
		t.Errorf("%d polls written one by one after the recorder stopped, want 1", s-single)
	}
}

// pollRun makes one poll of run, numbered seq, that returns at once.
func (e *seenEnv) pollRun(srv *Server, id, run string, seq uint64, stopping bool) {
	e.t.Helper()
	req := &automatorv1.PollRequest{InstanceId: id, Hostname: id + ".example", Version: "v1", Wait: durationpb.New(0),
		RunId: run, PollSeq: seq, Stopping: stopping}
	ctx := context.WithValue(e.t.Context(), keyAccount, "acme")
	if _, err := srv.ProxyService().Poll(ctx, req); err != nil {
		e.t.Fatalf("Poll(%s, run %s, seq %d): %v", id, run, seq, err)
	}
}

// wantStopped checks whether the stored record of instance id says it
// stopped, and its last poll.
func (e *seenEnv) wantStopped(id string, stopped bool, lastPoll time.Time) {
	e.t.Helper()
	list, err := e.st.Store.InstanceList(e.t.Context(), "acme")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, in := range list {
		if in.InstanceID == id {
			if in.Stopped != stopped || !in.LastPollAt.Equal(lastPoll) {
				e.t.Errorf("stored %s: stopped %v, last poll %v; want %v, %v", id, in.Stopped, in.LastPollAt, stopped, lastPoll)
			}
			return
		}
	}
	e.t.Errorf("instance %s is not stored (stored: %+v)", id, list)
}

// TestAStopAndTheStartAfterItAreWrittenAtOnceWhilePollsAreBatched: while
// polls are batched, the poll in which an instance says it is stopping is
// written at once, not at the next flush, and so is the first poll of the
// process started after it; the stopping process's further polls, which
// say it too, are batched. A poll of the stopping process still on its way
// (numbered before the stop) does not undo the stop, at the flush either.
func TestAStopAndTheStartAfterItAreWrittenAtOnceWhilePollsAreBatched(t *testing.T) {
	t.Parallel()
	e := newSeenEnv(t)
	e.batching()
	e.pollRun(e.srv, "a", "run-1", 1, false)
	e.clock.add(time.Second)
	e.pollRun(e.srv, "a", "run-1", 2, false)
	e.wantCounts(1, 0)

	e.clock.add(time.Second)
	tStop := e.clock.Now()
	e.pollRun(e.srv, "a", "run-1", 4, true)
	e.wantCounts(2, 0)
	e.wantStopped("a", true, tStop)

	e.clock.add(time.Second)
	e.pollRun(e.srv, "a", "run-1", 3, false) // cancelled by the stop, arriving late
	e.wantStopped("a", true, tStop)
	tLast := e.clock.Now()
	e.pollRun(e.srv, "a", "run-1", 5, true) // while its units finish
	e.wantCounts(2, 0)
	if err := e.srv.FlushInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantStopped("a", true, tLast)

	e.clock.add(time.Minute)
	e.pollRun(e.srv, "a", "run-2", 1, false)
	e.wantStopped("a", false, e.clock.Now())
}

// TestAStartAfterAStopHeardByAnotherReplicaIsWrittenAtOnce: replicas share
// the store, each batching the polls it hears. One heard the instance's
// process poll (kept in its memory: not stopping); the stop went to
// another. The first poll of the process started after it, heard by the
// first replica, is written at once: the instance is not left stopped
// until that replica's next flush.
func TestAStartAfterAStopHeardByAnotherReplicaIsWrittenAtOnce(t *testing.T) {
	t.Parallel()
	e := newSeenEnv(t)
	e.batching()
	other, err := New(Options{Store: e.st, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	other.seen.batching = true
	e.pollRun(e.srv, "a", "run-1", 1, false)
	e.clock.add(time.Second)
	e.pollRun(e.srv, "a", "run-1", 2, false)
	e.clock.add(time.Second)
	e.pollRun(other, "a", "run-1", 3, true)
	e.wantStopped("a", true, e.clock.Now())

	e.clock.add(time.Second)
	e.pollRun(e.srv, "a", "run-2", 1, false)
	e.wantStopped("a", false, e.clock.Now())
	if err := e.srv.FlushInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantStopped("a", false, e.clock.Now())
}

// TestABatchedPollFollowsTheClockWhenItStepsBack: the automator's clock
// steps back by an hour (an NTP step) while an instance polls, its polls
// batched: the record follows the clock, and once the instance dies it is
// listed offline two poll windows after its last poll, as always, not an
// hour later (its record kept at the time from before the step, ahead of
// the clock).
func TestABatchedPollFollowsTheClockWhenItStepsBack(t *testing.T) {
	t.Parallel()
	e := newSeenEnv(t)
	e.batching()
	e.pollRun(e.srv, "a", "run-1", 1, false)
	e.clock.add(-time.Hour)
	e.clock.add(time.Second)
	e.pollRun(e.srv, "a", "run-1", 2, false)
	if err := e.srv.FlushInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantStopped("a", false, e.clock.Now())

	// It dies.
	e.clock.add(InstanceOnlineWithin(e.srv.pollWindow) + time.Second)
	list, err := e.st.Store.InstanceList(t.Context(), "acme")
	if err != nil || len(list) != 1 {
		t.Fatalf("InstanceList: %v, %v; want instance a", list, err)
	}
	since := e.clock.Now().Add(-InstanceOnlineWithin(e.srv.pollWindow))
	if got := StatusOfInstance(list[0], since); got != InstanceOffline {
		t.Errorf("%v after its last poll, instance a is %s, want %s", InstanceOnlineWithin(e.srv.pollWindow)+time.Second, got, InstanceOffline)
	}
}
