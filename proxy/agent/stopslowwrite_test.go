package agent_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// heldStops is a store whose writes of polls that say the instance stops
// are held until the test opens gate. It tells held as each is held, and
// gaveUp when the poll's caller gave it up while it was held.
type heldStops struct {
	store.Store
	held   chan struct{}
	gate   chan struct{}
	gaveUp chan struct{}
}

func (h *heldStops) InstanceSeen(ctx context.Context, p store.InstanceSeenParams) error {
	if p.Stopping {
		h.held <- struct{}{}
		select {
		case <-h.gate:
		case <-ctx.Done():
			close(h.gaveUp)
			return ctx.Err()
		}
	}
	return h.Store.InstanceSeen(ctx, p)
}

// TestAStopIsListedWhenTheAutomatorsWriteOfItIsSlow: a proxy stopped with
// nothing running, whose automator answered its polls until then, waits
// for the answer to the poll that says it stops while the automator's
// write of it takes longer than a stop against an automator that did not
// answer is given (a busy disk, a busy database), and the instance is
// listed stopped, not as one that died two poll windows later. The bound
// of a stop the automator did not answer before is 100 ms here, and the
// write takes ten times that.
func TestAStopIsListedWhenTheAutomatorsWriteOfItIsSlow(t *testing.T) {
	t.Parallel()
	const unheard = 100 * time.Millisecond
	h := &heldStops{held: make(chan struct{}, 1), gate: make(chan struct{}), gaveUp: make(chan struct{})}
	a := automatortest.Start(t, automatortest.Options{WrapStore: func(st store.Store) store.Store { h.Store = st; return h }})
	ag, cancel, stopped := runStopBounded(t, automatorv1.NewProxyServiceClient(a.ProxyConn(t)), a.Key, unheard)
	automatortest.WaitFor(t, 10*time.Second, "the proxy's first poll to be answered", func() bool { return !ag.LastPoll().IsZero() })
	cancel()
	waittest.Recv(t, h.held, "the write of the stop's poll to be held")
	select {
	case <-h.gaveUp:
		t.Fatal("the proxy gave up the poll saying it stops while the automator wrote it")
	case <-time.After(10 * unheard):
		close(h.gate)
	}
	waittest.Recv(t, stopped, "the proxy to stop once its stop was written")
	list, err := a.Store.InstanceList(context.Background(), a.Account)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].InstanceID != "host-a" || !list[0].Stopped {
		t.Errorf("after the stop the account lists %+v; want host-a, stopped", list)
	}
}

// cutClient is a proxy's client whose polls fail as Unavailable, the
// connection gone, once cut is set; it counts the polls it passed on.
type cutClient struct {
	automatorv1.ProxyServiceClient
	cut    atomic.Bool
	passed atomic.Int32
}

func (c *cutClient) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	if c.cut.Load() {
		return nil, status.Error(codes.Unavailable, "connection cut by the test")
	}
	c.passed.Add(1)
	return c.ProxyServiceClient.Poll(ctx, in, opts...)
}

// TestAStopThatFindsTheAutomatorUnreachableKeepsItsShortBound: the longer
// wait for the stop's answer after an answered poll is for an automator
// that is up; when the stop's first try finds it unreachable (the
// connection dropped as the proxy stopped), the tries after it keep within
// the bound of a stop whose automator did not answer (100 ms here), not
// the longer one (an hour here).
func TestAStopThatFindsTheAutomatorUnreachableKeepsItsShortBound(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{PollWindow: time.Minute})
	c := &cutClient{ProxyServiceClient: automatorv1.NewProxyServiceClient(a.ProxyConn(t))}
	ag, cancel, stopped := runStopBounded(t, c, a.Key, 100*time.Millisecond)
	// The first poll, which does not wait, answered; the next one, on
	// its way, waits for a minute on the automator.
	automatortest.WaitFor(t, 10*time.Second, "the proxy's second poll to be on its way", func() bool {
		return !ag.LastPoll().IsZero() && c.passed.Load() >= 2
	})
	c.cut.Store(true)
	cancel()
	waittest.Recv(t, stopped, "the stop to end within its short bound, the automator unreachable")
}

// silentClient is a proxy's client whose automator never answers (its
// process stopped, its packets dropped): each poll waits for its context
// to end. It tells polled as a poll begins.
type silentClient struct {
	automatorv1.ProxyServiceClient
	polled chan struct{}
}

func (c *silentClient) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	select {
	case c.polled <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestAStopWhoseAutomatorNeverAnsweredKeepsItsShortBound: the longer wait
// for the stop's answer is for an automator that answered the poll before
// the stop; a proxy stopped with nothing running whose automator never
// answered it (stopped, blackholed) stops within the bound of a stop the
// automator did not answer (100 ms here), not the longer one (an hour
// here).
func TestAStopWhoseAutomatorNeverAnsweredKeepsItsShortBound(t *testing.T) {
	t.Parallel()
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	c := &silentClient{polled: make(chan struct{}, 1)}
	_, cancel, stopped := runStopBounded(t, c, key, 100*time.Millisecond)
	waittest.Recv(t, c.polled, "the proxy's first poll to be on its way")
	cancel()
	waittest.Recv(t, stopped, "the stop to end within its short bound, the automator silent")
}

// runStopBounded runs an agent of client c holding key, whose stop waits
// an hour for the answer of an automator that answered the poll before it
// and unheard for one that did not; cancel stops it (and is called when
// the test ends), and stopped is closed once it has.
func runStopBounded(t *testing.T, c automatorv1.ProxyServiceClient, key crypto.Key, unheard time.Duration) (ag *agent.Agent, cancel context.CancelFunc, stopped <-chan struct{}) {
	t.Helper()
	ag = agent.New(agent.WithStopBounds(agent.Options{
		Client: c, Keys: crypto.Keys{key},
		InstanceID: "host-a", Hostname: "host-a", ScriptsDir: t.TempDir(), MaxConcurrency: 1,
		PollWait: time.Minute, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, time.Hour, unheard))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan struct{})
	go func() { defer close(done); _ = ag.Run(ctx) }()
	return ag, cancel, done
}
