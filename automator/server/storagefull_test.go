package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/loglimit"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// fullDisk is a store whose writes of units fail as on a full disk, while
// one unit is always past its deadline.
type fullDisk struct {
	store.Store
	expiries atomic.Int64
	// third gets the time of the third expiry.
	third chan time.Time
	first time.Time
}

var errFull = fmt.Errorf("writing: %w", store.ErrStorageFull)

func (f *fullDisk) WorkEnqueue(context.Context, store.WorkEnqueueParams) (store.Work, error) {
	return store.Work{}, errFull
}

func (f *fullDisk) WorkNextDeadline(context.Context) (time.Time, bool, error) {
	return time.Now().Add(-time.Hour), true, nil
}

func (f *fullDisk) WorkExpire(context.Context, store.WorkExpireParams) ([]store.Work, error) {
	switch f.expiries.Add(1) {
	case 1:
		f.first = time.Now()
	case 3:
		f.third <- time.Now()
	}
	return nil, errFull
}

// TestSweeperPausesAfterAFailedExpiry: while the store refuses to end a due
// unit (its disk is full), the sweeper tries again once a SweepInterval,
// not at once: the unit is still due, and retrying at once would spin and
// flood the log.
func TestSweeperPausesAfterAFailedExpiry(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	full := &fullDisk{third: make(chan time.Time, 1)}
	newEnv(t, envOptions{sweepInterval: interval, wrap: func(st store.Store) store.Store { full.Store = st; return full }})
	select {
	case third := <-full.third:
		if d := third.Sub(full.first); d < 2*interval {
			t.Errorf("three failed expiries within %v; want one per SweepInterval (%v), at least %v from the first to the third", d, interval, 2*interval)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%d expiries in 30 s; want one per %v", full.expiries.Load(), interval)
	}
}

// TestFullDiskIsResourceExhaustedAndSaysSo: a caller whose unit could not be
// stored for lack of disk space hears so, with ResourceExhausted (gRPC's
// code for a full file system), not a bare internal error.
func TestFullDiskIsResourceExhaustedAndSaysSo(t *testing.T) {
	t.Parallel()
	full := &fullDisk{third: make(chan time.Time, 1)}
	e := newEnv(t, envOptions{sweepInterval: time.Hour, wrap: func(st store.Store) store.Store { full.Store = st; return full }})
	_, err := e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
		Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "out of disk space while queueing work: nothing was stored") {
		t.Errorf("Submit on a full disk: %v; want ResourceExhausted saying the database is out of disk space and nothing was stored", err)
	}
	// When space is freed is the operator's doing: no time to retry in is
	// known, and none is given (no Retry-After over HTTP).
	if d, ok := retryInfo(err); ok {
		t.Errorf("Submit on a full disk carries RetryInfo %v; want none", d)
	}
	// Which refusal it is, for a caller (and the HTTP gateway, which
	// answers it 507) to tell a full disk from a limit of its own.
	if ei := errorInfo(err); ei.GetReason() != grpcwire.ReasonStorageFull || ei.GetDomain() != grpcwire.ErrorDomain {
		t.Errorf("Submit on a full disk: ErrorInfo %v; want reason %s, domain %s", ei, grpcwire.ReasonStorageFull, grpcwire.ErrorDomain)
	}
}

// unanswered is a store whose first expiry gets no answer: it returns
// only when its context ends, as a read on a connection cut off without a
// word would, much later. Later expiries are counted on again.
type unanswered struct {
	store.Store
	expiries atomic.Int64
	again    chan struct{} // closed at the second expiry
}

func (u *unanswered) WorkNextDeadline(context.Context) (time.Time, bool, error) {
	return time.Now().Add(-time.Hour), true, nil
}

func (u *unanswered) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	switch u.expiries.Add(1) {
	case 1:
		<-ctx.Done()
		return nil, ctx.Err()
	case 2:
		close(u.again)
	}
	return nil, nil
}

// TestASweepThatGetsNoAnswerIsGivenUp: a sweep whose store call gets no
// answer is given up once SweepTimeout has passed, and the sweeper sweeps
// again, rather than stop until the operating system gives the
// connection up.
func TestASweepThatGetsNoAnswerIsGivenUp(t *testing.T) {
	t.Parallel()
	u := &unanswered{again: make(chan struct{})}
	newEnv(t, envOptions{sweepInterval: 50 * time.Millisecond, sweepTimeout: 100 * time.Millisecond,
		wrap: func(st store.Store) store.Store { u.Store = st; return u }})
	select {
	case <-u.again:
	case <-time.After(waittest.Bound):
		t.Fatalf("%d expiries in %v; want a second one once the first, unanswered, was given up", u.expiries.Load(), waittest.Bound)
	}
}

// TestFullDiskIsLoggedWithinABound: callers queueing work on a full disk
// are each refused, but the log has at most loglimit.DefaultLines lines of
// them a minute, not one per call. The clock is injected and stands
// still: the calls fall within one minute however long they take.
func TestFullDiskIsLoggedWithinABound(t *testing.T) {
	t.Parallel()
	var log syncLog
	full := &fullDisk{third: make(chan time.Time, 1)}
	e := newEnv(t, envOptions{log: &log, clock: newFakeClock(), sweepInterval: time.Hour, wrap: func(st store.Store) store.Store { full.Store = st; return full }})
	const calls = loglimit.DefaultLines + 10
	for range calls {
		_, err := e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
			Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("Submit on a full disk: %v; want ResourceExhausted", err)
		}
	}
	if n := len(log.lines("out of disk space")); n != loglimit.DefaultLines {
		t.Fatalf("%d lines for %d calls refused within a minute, want %d:\n%s", n, calls, loglimit.DefaultLines, log.lines())
	}
}

// storeFailures counts the store errors a Metrics is told of, by kind.
type storeFailures struct {
	undeliveredCount
	mu    sync.Mutex
	kinds map[string]int
}

func (s *storeFailures) StoreFailed(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kinds == nil {
		s.kinds = map[string]int{}
	}
	s.kinds[kind]++
}

func (s *storeFailures) count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kinds[kind]
}

// TestFullDiskIsCountedForTheMetrics: each call refused for lack of disk
// space is counted as a store error of kind storage_full, the log's lines
// of them bounded or not.
func TestFullDiskIsCountedForTheMetrics(t *testing.T) {
	t.Parallel()
	full := &fullDisk{third: make(chan time.Time, 1)}
	m := &storeFailures{}
	e := newEnv(t, envOptions{metrics: m, sweepInterval: time.Hour, wrap: func(st store.Store) store.Store { full.Store = st; return full }})
	const calls = 3
	for range calls {
		e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
			Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)})
	}
	if n := m.count(server.StoreErrorStorageFull); n < calls {
		t.Fatalf("%d store errors of kind %s counted for %d calls refused on a full disk, want at least %d", n, server.StoreErrorStorageFull, calls, calls)
	}
}

// fillingDisk refuses to queue units, as a full disk does, while full is set.
type fillingDisk struct {
	store.Store
	full atomic.Bool
}

func (f *fillingDisk) WorkEnqueue(ctx context.Context, p store.WorkEnqueueParams) (store.Work, error) {
	if f.full.Load() {
		return store.Work{}, errFull
	}
	return f.Store.WorkEnqueue(ctx, p)
}

// startFillingDisk starts an automator logging to log on a store that is
// full until the disk returned says otherwise, and returns that and a
// function that submits one unit.
func startFillingDisk(t *testing.T, log *syncLog) (*fillingDisk, func() error) {
	t.Helper()
	disk := &fillingDisk{}
	disk.full.Store(true)
	e := newEnv(t, envOptions{log: log, sweepInterval: time.Hour, wrap: func(st store.Store) store.Store { disk.Store = st; return disk }})
	return disk, func() error {
		_, err := e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
			Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)})
		return err
	}
}

// TestTheEndOfAFullDiskIsLoggedOnce: once a write succeeds after writes
// were refused for lack of space, one line says the database takes writes
// again; the writes after it say nothing.
func TestTheEndOfAFullDiskIsLoggedOnce(t *testing.T) {
	t.Parallel()
	var log syncLog
	disk, submit := startFillingDisk(t, &log)
	if err := submit(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Submit on a full disk: %v; want ResourceExhausted", err)
	}
	if n := len(log.lines("takes writes again")); n != 0 {
		t.Fatalf("the end of the full disk logged while it lasts:\n%s", log.lines())
	}
	disk.full.Store(false)
	for range 3 {
		if err := submit(); err != nil {
			t.Fatalf("Submit once space is freed: %v", err)
		}
	}
	if n := len(log.lines("the database takes writes again")); n != 1 {
		t.Fatalf("%d lines say the full disk is over, want 1:\n%s", n, log.lines())
	}
}

// TestADiskFillingAndFreedByTurnsIsLoggedWithinABound: SQLite reuses the
// pages it freed, so on a disk just full some writes succeed between the
// refused ones; the turns' lines share the full disk's bound, and their
// ends a bound of their own (5 a minute).
func TestADiskFillingAndFreedByTurnsIsLoggedWithinABound(t *testing.T) {
	t.Parallel()
	var log syncLog
	disk := &fillingDisk{}
	e := newEnv(t, envOptions{log: &log, sweepInterval: time.Hour, wrap: func(st store.Store) store.Store { disk.Store = st; return disk }})
	for range loglimit.DefaultLines {
		for _, full := range []bool{true, false} {
			disk.full.Store(full)
			e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
				Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)})
		}
	}
	if n := len(log.lines()); n > loglimit.DefaultLines+5 {
		t.Fatalf("%d lines for %d turns of a disk full then not within a minute, want at most %d:\n%s", n, loglimit.DefaultLines, loglimit.DefaultLines+5, log.lines())
	}
	if n := len(log.lines("takes writes again")); n != 5 {
		t.Errorf("%d lines say a turn of the full disk is over, want 5 (their bound):\n%s", n, log.lines())
	}
}

// TestTheEndOfAFullDiskIsSaidWhenItsLinesUsedUpTheirBound: a full disk
// whose refusals used up the lines it may write in a minute still has its
// end said (a review: it was counted in the next minute's line of refusals
// not logged, which read as the disk still full).
func TestTheEndOfAFullDiskIsSaidWhenItsLinesUsedUpTheirBound(t *testing.T) {
	t.Parallel()
	var log syncLog
	disk, submit := startFillingDisk(t, &log)
	for range loglimit.DefaultLines + 3 {
		if err := submit(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("Submit on a full disk: %v; want ResourceExhausted", err)
		}
	}
	disk.full.Store(false)
	if err := submit(); err != nil {
		t.Fatalf("Submit once space is freed: %v", err)
	}
	if n := len(log.lines("the database takes writes again: the disk has space")); n != 1 {
		t.Fatalf("%d lines say the full disk is over, want 1:\n%s", n, log.lines())
	}
}

// expiryFull is a store whose units cannot be timed out, as on a full
// disk, while reads go on.
type expiryFull struct{ store.Store }

func (expiryFull) WorkExpire(context.Context, store.WorkExpireParams) ([]store.Work, error) {
	return nil, errFull
}

// TestACallerWaitingForAUnitThatCannotBeTimedOutOnAFullDiskHearsItTimedOut:
// a unit open past its deadline while a full disk keeps it from being
// timed out in the database has ended all the same (no claim and no
// result is taken past the deadline): its waiting caller hears it timed
// out, its reason saying why it is not recorded yet, a SweepInterval past
// the deadline (guarantee 2). Before, the caller waited until space was
// freed (113 s for a 45 s timeout, in a review).
func TestACallerWaitingForAUnitThatCannotBeTimedOutOnAFullDiskHearsItTimedOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{sweepInterval: 200 * time.Millisecond, wrap: func(st store.Store) store.Store { return expiryFull{st} }})
	ctx, cancel := context.WithTimeout(t.Context(), waittest.Bound)
	defer cancel()
	st, err := e.callerClient().ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: e.account,
		Command: &automatorv1.Command{Script: "hello.sh"}, Timeout: durationpb.New(time.Second)})
	if err != nil || st.GetState() != automatorv1.State_STATE_TIMED_OUT ||
		!strings.HasPrefix(st.GetReason(), store.UnclaimedReason) || !strings.Contains(st.GetReason(), "out of disk space: it records the unit timed_out once space is freed") {
		t.Fatalf("ExecuteOnProxy of a unit that cannot be timed out for a full disk: %v, %v; want it timed out, saying why it is not recorded", st, err)
	}
	if st.GetRemaining() != nil || st.GetFinishedAt().AsTime() != st.GetDeadline().AsTime() {
		t.Errorf("the unit heard timed out: remaining %v, finished %v; want none, at its deadline %v", st.GetRemaining(), st.GetFinishedAt().AsTime(), st.GetDeadline().AsTime())
	}
	// The store still holds it open: a read says so.
	got, err := e.callerClient().Get(t.Context(), &automatorv1.GetRequest{WorkId: st.GetWorkId()})
	if err != nil || got.GetState() != automatorv1.State_STATE_QUEUED {
		t.Errorf("Get: %v, %v; want it still queued in the database", got.GetState(), err)
	}
}
