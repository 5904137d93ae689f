package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// heldWrites is a store whose next write of an instance's poll (one at a
// time, of a poll that does not say it is stopping, or a batch) waits,
// once armed, until the test releases it: a poll on its way to the store
// while a later one is written.
type heldWrites struct {
	store.Store
	mu      sync.Mutex
	one     bool          // hold the next InstanceSeen of a poll not stopping
	batch   bool          // hold the next InstancesSeen
	held    chan struct{} // a write is held
	release chan struct{}
}

func newHeldWrites(st store.Store) *heldWrites {
	return &heldWrites{Store: st, held: make(chan struct{}, 1), release: make(chan struct{})}
}

func (h *heldWrites) hold(armed *bool) {
	h.mu.Lock()
	hold := *armed
	*armed = false
	h.mu.Unlock()
	if hold {
		h.held <- struct{}{}
		<-h.release
	}
}

func (h *heldWrites) InstanceSeen(ctx context.Context, p store.InstanceSeenParams) error {
	if !p.Stopping {
		h.hold(&h.one)
	}
	return h.Store.InstanceSeen(ctx, p)
}

func (h *heldWrites) InstancesSeen(ctx context.Context, ps []store.InstanceSeenParams) ([]store.InstanceSeenParams, error) {
	h.hold(&h.batch)
	return h.Store.InstancesSeen(ctx, ps)
}

// stopWindow is a proxy process's polls as instance a of e's account.
type stopWindow struct {
	t *testing.T
	e *env
}

func (s stopWindow) poll(run string, seq uint64, stopping bool) {
	s.t.Helper()
	if _, err := s.e.proxyClient().Poll(context.Background(), &automatorv1.PollRequest{
		InstanceId: "a", Wait: durationpb.New(0), RunId: run, PollSeq: seq, Stopping: stopping}); err != nil {
		s.t.Fatalf("poll %d of %s (stopping %v): %v", seq, run, stopping, err)
	}
}

func (s stopWindow) wantStopped(want bool, when string) {
	s.t.Helper()
	list, err := s.e.callerClient().ListInstances(context.Background(), &automatorv1.ListInstancesRequest{Account: s.e.account})
	if err != nil || len(list.GetInstances()) != 1 {
		s.t.Fatalf("instances: %v, %v; want one", list.GetInstances(), err)
	}
	if got := list.GetInstances()[0].GetStopped(); got != want {
		s.t.Errorf("%s: instance a stopped %v, want %v", when, got, want)
	}
}

// TestAPollOnItsWayWhenTheStopIsWrittenDoesNotEndTheStop: a proxy
// process's poll still on its way to the store (written one at a time: the
// first of its run) when the process's next poll, saying it stops, is
// written does not end the stop when it is written after it: polls of one
// process are ordered by their numbers. A poll of a new process (started
// again) ends it at once.
func TestAPollOnItsWayWhenTheStopIsWrittenDoesNotEndTheStop(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var h *heldWrites
	e := newEnv(t, envOptions{clock: clock, wrap: func(st store.Store) store.Store { h = newHeldWrites(st); return h }})
	s := stopWindow{t, e}
	h.mu.Lock()
	h.one = true
	h.mu.Unlock()
	first := make(chan struct{})
	go func() { defer close(first); s.poll("run-1", 1, false) }()
	waittest.Recv(t, h.held, "the first poll's write to be on its way")
	s.poll("run-1", 2, true)
	s.wantStopped(true, "the stop written")
	close(h.release)
	waittest.Recv(t, first, "the first poll to be answered")
	s.wantStopped(true, "the poll before the stop written after it")
	s.poll("run-2", 1, false)
	s.wantStopped(false, "a new process polled")
}

// TestAPollBatchedWhenTheStopIsWrittenDoesNotEndTheStop: a proxy
// process's poll kept in memory (RecordInstances), whose batch is on its
// way to the store when the process's next poll, saying it stops, is
// written at once, at the same time on the automator's clock (a coarse
// clock, or the batch's poll read the clock last), does not end the stop
// when its batch is written after it.
func TestAPollBatchedWhenTheStopIsWrittenDoesNotEndTheStop(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var h *heldWrites
	e := newEnv(t, envOptions{clock: clock, wrap: func(st store.Store) store.Store { h = newHeldWrites(st); return h }})
	s := stopWindow{t, e}
	ctx, cancel := context.WithCancel(context.Background())
	recording := make(chan struct{})
	go func() { defer close(recording); e.srv.RecordInstances(ctx) }()
	t.Cleanup(func() { cancel(); <-recording })
	s.poll("run-1", 1, false) // written at once: a new instance
	waittest.Until(t, "the first poll to be written", func() bool {
		l, err := e.store.InstanceList(context.Background(), e.account)
		return err == nil && len(l) == 1
	})
	h.mu.Lock()
	h.batch = true
	h.mu.Unlock()
	clock.Advance(time.Second)
	s.poll("run-1", 2, false) // kept in memory
	flushed := make(chan error, 1)
	go func() { flushed <- e.srv.FlushInstances(context.Background()) }()
	waittest.Recv(t, h.held, "the batch holding the second poll to be on its way")
	s.poll("run-1", 3, true)
	s.wantStopped(true, "the stop written")
	close(h.release)
	if err := waittest.Recv(t, flushed, "the flush to end"); err != nil {
		t.Fatalf("FlushInstances: %v", err)
	}
	s.wantStopped(true, "the batch holding the poll before the stop written after it")
	s.poll("run-2", 1, false)
	s.wantStopped(false, "a new process polled")
}
