package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// closingMetrics is the automator's metrics, telling when a poll ends on
// the server (after everything it did was counted).
type closingMetrics struct {
	*metrics.Metrics
	closed chan struct{}
}

func (m closingMetrics) PollOpened(account string) func() {
	done := m.Metrics.PollOpened(account)
	return func() { done(); m.closed <- struct{}{} }
}

// counterValue reads a counter (or a histogram's count) of m whose labels
// include labels; -1 when there is none.
func counterValue(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			for k, v := range labels {
				if label(s, k) != v {
					continue next
				}
			}
			if h := s.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return s.GetCounter().GetValue()
		}
	}
	return -1
}

// TestUnitClaimedForAPollThatLeftCountsAsClaimed: a unit claimed in the
// store for a poll that ended before it could be answered is claimed (its
// instance is recorded, it counted in flight) and then failed as never
// delivered: automator_work_claimed_total counts it once, as it counts a
// unit whose answer the proxy then lost, beside finished{failed} and
// undelivered.
func TestUnitClaimedForAPollThatLeftCountsAsClaimed(t *testing.T) {
	t.Parallel()
	gate := &claimOutlivingItsPoll{entered: make(chan struct{}, 1)}
	m := closingMetrics{Metrics: metrics.New(metrics.Options{}), closed: make(chan struct{}, 1)}
	e := newEnv(t, envOptions{pollWindow: time.Minute, metrics: m,
		wrap: func(st store.Store) store.Store { gate.Store = st; return gate }})
	submit(t, e.callerClient(), e.account, time.Hour) // no poll waits: queued

	pctx, leave := context.WithCancel(t.Context())
	polled := pollAsync(pctx, e.proxyClient(), "a", 1)
	waittest.Recv(t, gate.entered, "the poll's claim to reach the store")
	leave()
	waittest.Recv(t, polled, "the poll that left to end")
	waittest.Recv(t, m.closed, "the poll to end on the server")

	acme := map[string]string{"account": "acme"}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"automator_work_claimed_total", acme},
		{"automator_work_queued_to_claimed_seconds", nil},
		{"automator_work_finished_total", map[string]string{"account": "acme", "state": "failed"}},
		{"automator_work_undelivered_total", acme},
	} {
		if got := counterValue(t, m.Metrics, c.name, c.labels); got != 1 {
			t.Errorf("%s%v = %v after one unit claimed for a poll that left; want 1", c.name, c.labels, got)
		}
	}
}

// lostEnqueue fails every enqueue as a store whose answer was lost does,
// storing nothing, and signals each WorkComplete once it has answered.
type lostEnqueue struct {
	store.Store
	completed chan error
}

func (lostEnqueue) WorkEnqueue(context.Context, store.WorkEnqueueParams) (store.Work, error) {
	return store.Work{}, errors.New("queueing work: connection reset by peer")
}

func (l lostEnqueue) WorkComplete(ctx context.Context, p store.WorkCompleteParams) (store.Work, error) {
	w, err := l.Store.WorkComplete(ctx, p)
	l.completed <- err
	return w, err
}

// TestUnitWhoseEnqueueFailedIsNotCountedAsClaimed: a unit to be handed to
// a waiting poll whose enqueue failed with no telling whether it was
// stored is failed in case it was; when it was not, nothing was claimed,
// and automator_work_claimed_total does not count it.
func TestUnitWhoseEnqueueFailedIsNotCountedAsClaimed(t *testing.T) {
	t.Parallel()
	st := lostEnqueue{completed: make(chan error, 1)}
	m := metrics.New(metrics.Options{})
	e := newEnv(t, envOptions{pollWindow: time.Minute, metrics: m,
		wrap: func(raw store.Store) store.Store { st.Store = raw; return st }})
	pollAsync(t.Context(), e.proxyClient(), "a", 1)
	e.awaitWaiting(1)
	if _, err := e.callerClient().Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}}); err == nil {
		t.Fatal("submit with the store failing enqueues succeeded")
	}
	if err := waittest.Recv(t, st.completed, "the unit to be failed in case it was stored"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("failing the unit whose enqueue failed: %v; want ErrNotFound (it was not stored)", err)
	}
	if got := counterValue(t, m, "automator_work_claimed_total", map[string]string{"account": "acme"}); got > 0 {
		t.Errorf("automator_work_claimed_total{account=\"acme\"} = %v; want no claim counted for a unit never stored", got)
	}
}
