package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

// claimWithin is claim with the time remaining that the automator hands out.
func claimWithin(t *testing.T, id string, remaining time.Duration) *automatorv1.Claim {
	t.Helper()
	c := claim(t, id, &automatorv1.Command{Script: "s"})
	c.Remaining = durationpb.New(remaining)
	return c
}

// TestScriptGetsTheTimeRemainingAsItsDeadline (guarantee 6): the run's
// deadline, and PROXY_DEADLINE_SECONDS, are the time remaining that the
// automator handed out, counted from when the claim arrived here.
func TestScriptGetsTheTimeRemainingAsItsDeadline(t *testing.T) {
	t.Parallel()
	type run struct {
		spec   runner.Spec
		called time.Time
	}
	runs := make(chan run, 1)
	useRunner(t, func(_ context.Context, s runner.Spec) (runner.Result, error) {
		runs <- run{s, time.Now()}
		return runner.Result{}, nil
	})
	f := newFake()
	startAgent(t, f, 1, nil)
	sent := time.Now()
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claimWithin(t, "w1", time.Hour)}}
	r := waittest.Recv(t, runs, "the claim to run")
	waittest.Recv(t, f.completed, "the result to be posted")

	// The claim arrived between sent and the run.
	if d := r.spec.Deadline; d.Before(sent.Add(time.Hour)) || d.After(r.called.Add(time.Hour)) {
		t.Errorf("run deadline %v after the claim was sent, want the hour remaining (between %v and %v)",
			d.Sub(sent), time.Hour, r.called.Add(time.Hour).Sub(sent))
	}
	secs, err := strconv.Atoi(r.spec.Env["PROXY_DEADLINE_SECONDS"])
	if low := int((time.Hour - time.Since(sent)).Seconds()) - 1; err != nil || secs < low || secs > 3600 {
		t.Errorf("PROXY_DEADLINE_SECONDS = %q, want the seconds remaining (%d to 3600)", r.spec.Env["PROXY_DEADLINE_SECONDS"], low)
	}
}

// runSpecs makes the test's runs end at once, each handing over its spec.
func runSpecs(t *testing.T) <-chan runner.Spec {
	runs := make(chan runner.Spec, 4)
	useRunner(t, func(_ context.Context, s runner.Spec) (runner.Result, error) {
		runs <- s
		return runner.Result{}, nil
	})
	return runs
}

// pollTimes is a fake automator that tells when each poll reached it.
type pollTimes struct {
	*fakeAutomator
	at chan time.Time
}

func (p *pollTimes) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	p.at <- time.Now()
	return p.fakeAutomator.Poll(ctx, in, opts...)
}

// TestAClaimsTimeIsCountedFromItsMakingNotItsArrival (guarantees 6 and 7):
// an answer that took long to come (a slow link, a large one) does not
// give its claims' scripts that time past their units' deadlines: their
// remaining time counts from the poll's sending plus the time the
// automator says it held the poll (PollResponse.held), not from the
// answer's arrival (a review: a script ran 2 s past its unit's deadline
// over a link whose answer took 2 s). From an automator that does not say
// (predating held), from the arrival, as before: TestClaimedAt.
func TestAClaimsTimeIsCountedFromItsMakingNotItsArrival(t *testing.T) {
	t.Parallel()
	runs := runSpecs(t)
	f := &pollTimes{fakeAutomator: newFake(), at: make(chan time.Time, 16)}
	startAgent(t, f, 1, nil)
	const held, remaining = 10 * time.Millisecond, time.Hour
	polled := waittest.Recv(t, f.at, "the agent's poll")
	// The answer on its way, after the automator held the poll 10 ms: it
	// comes later than that.
	time.Sleep(50 * time.Millisecond)
	answered := time.Now()
	f.responses <- &automatorv1.PollResponse{Held: durationpb.New(held), Claims: []*automatorv1.Claim{claimWithin(t, "w1", remaining)}}
	s := waittest.Recv(t, runs, "the claim to run")
	if latest := polled.Add(held + remaining); s.Deadline.After(latest) {
		t.Errorf("the run's deadline is %v past the poll's arrival at the automator plus held plus remaining (the answer came %v after the poll); want it at most that",
			s.Deadline.Sub(latest), answered.Sub(polled))
	}
	waittest.Recv(t, f.completed, "the result to be posted")
}

// setupTimes is a fake automator whose polls wait for a connection to be
// set up before their requests are written, as gRPC's do on a new
// connection, and tell SendTimes, as gRPC does, when they were written.
type setupTimes struct {
	*fakeAutomator
	setup   time.Duration
	written chan time.Time
}

func (p *setupTimes) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	time.Sleep(p.setup) // the handshakes of a new connection over a slow link
	at := time.Now()
	SendTimes().HandleRPC(ctx, &stats.OutPayload{Client: true, SentTime: at})
	p.written <- at
	return p.fakeAutomator.Poll(ctx, in, opts...)
}

// TestAClaimsTimeIsNotCutByTheWaitForAConnection: a poll that waited for
// its connection to be set up before its request was written counts its
// claims' time from the writing, not from before the wait, which would cut
// its scripts short by it (a re-review: 7.5 s of 11.5 s over a link of
// 1.5 s each way).
func TestAClaimsTimeIsNotCutByTheWaitForAConnection(t *testing.T) {
	t.Parallel()
	runs := runSpecs(t)
	f := &setupTimes{fakeAutomator: newFake(), setup: 50 * time.Millisecond, written: make(chan time.Time, 16)}
	startAgent(t, f, 1, nil)
	// Answered at once: held 0, so that the answer cannot come before
	// the poll's writing plus held.
	const held, remaining = 0, time.Hour
	written := waittest.Recv(t, f.written, "the agent's poll to be written")
	f.responses <- &automatorv1.PollResponse{Held: durationpb.New(held), Claims: []*automatorv1.Claim{claimWithin(t, "w1", remaining)}}
	s := waittest.Recv(t, runs, "the claim to run")
	if want := written.Add(held + remaining); !s.Deadline.Equal(want) {
		t.Errorf("the run's deadline is %v from the poll's writing plus held plus remaining; want it there (not before it by the wait for a connection, %v)", s.Deadline.Sub(want), f.setup)
	}
	waittest.Recv(t, f.completed, "the result to be posted")
}

// TestClaimedAt: a poll's claims count from its sending plus the time the
// automator held it, when that is before the answer's arrival; from the
// arrival when the automator does not say (predating held), or says a
// held past the arrival or one that is not a duration.
func TestClaimedAt(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	arrived := sent.Add(3 * time.Second)
	for _, c := range []struct {
		held *durationpb.Duration
		want time.Time
	}{
		{durationpb.New(time.Second), sent.Add(time.Second)},
		{nil, arrived},
		{durationpb.New(5 * time.Second), arrived},
		{durationpb.New(-time.Second), arrived},
		{&durationpb.Duration{Seconds: 1, Nanos: -1}, arrived},
	} {
		if got := claimedAt(sent, arrived, &automatorv1.PollResponse{Held: c.held}); !got.Equal(c.want) {
			t.Errorf("held %v: claims counted from %v after sending; want %v", c.held, got.Sub(sent), c.want.Sub(sent))
		}
	}
}

// TestAScriptKilledAtTheDeadlineIsNotReported (guarantee 7): when the run
// ends at the deadline (the runner killed the tree), the proxy posts
// nothing: the unit is the automator's to time out.
func TestAScriptKilledAtTheDeadlineIsNotReported(t *testing.T) {
	t.Parallel()
	ended := make(chan struct{})
	useRunner(t, func(_ context.Context, s runner.Spec) (runner.Result, error) {
		defer close(ended)
		// As runner.Run does: wait for the deadline, kill, return no result.
		<-time.After(time.Until(s.Deadline))
		return runner.Result{}, fmt.Errorf("script %q: %w; its process tree was killed", s.Script, runner.ErrDeadline)
	})
	f := newFake()
	stop := startAgent(t, f, 1, nil)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claimWithin(t, "w1", 50*time.Millisecond)}}
	waittest.Recv(t, ended, "the run to end at its deadline")
	stop() // waits for the unit's goroutine, and so for any post it makes
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.completes) != 0 {
		t.Fatalf("posted %d results for a unit killed at its deadline, want none: %v", len(f.completes), f.completes)
	}
}

// downAutomator refuses every result as unavailable. Like a gRPC client it
// sends no call whose context has ended; it records the deadline of the
// context of each call it sends: the latest the call can be on its way.
type downAutomator struct {
	*fakeAutomator
	mu    sync.Mutex
	posts []time.Time // each sent call's context deadline (zero: none)
}

func (d *downAutomator) Complete(ctx context.Context, _ *automatorv1.CompleteRequest, _ ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.posts = append(d.posts, dl)
	d.mu.Unlock()
	return nil, status.Error(codes.Unavailable, "automator down")
}

// TestNoResultIsPostedAfterTheDeadline (guarantee 7): a result the
// automator cannot take is posted again until the unit's deadline, and no
// post can be on its way after it (not even one whose backoff ended late).
func TestNoResultIsPostedAfterTheDeadline(t *testing.T) {
	t.Parallel()
	ran := make(chan time.Time, 1)
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		ran <- time.Now()
		return runner.Result{Stdout: []byte("done")}, nil
	})
	d := &downAutomator{fakeAutomator: newFake()}
	log := &lockedWriter{b: &bytes.Buffer{}}
	a := New(Options{
		tune:   testTuning(t),
		Client: d, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); waittest.Recv(t, done, "the agent's Run to return") })

	// Time for the claim to run and its result to be posted at least
	// once, on a loaded machine: a first post begun after the deadline
	// would not be sent, and the test would see none. The test waits for
	// the deadline, so it takes this long.
	const remaining = 2 * time.Second
	d.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claimWithin(t, "w1", remaining)}}
	// The claim arrived before it ran: its deadline is at the latest then
	// plus the time remaining.
	latest := waittest.Recv(t, ran, "the claim to run").Add(remaining)
	waittest.Until(t, "the proxy to give the result up at the deadline", func() bool {
		return strings.Contains(log.String(), "result not acknowledged by the automator before the deadline; giving up")
	})
	cancel()
	waittest.Recv(t, done, "the agent's Run to return")

	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.posts) == 0 {
		t.Fatal("the result was never posted")
	}
	for i, dl := range d.posts {
		if dl.IsZero() || dl.After(latest) {
			t.Errorf("post %d of %d could be sent until %v, after the unit's deadline %v", i+1, len(d.posts), dl, latest)
		}
	}
}

// TestAResultIsPostedOnceMoreJustBeforeTheDeadline: a result whose post
// failed, and whose backoff would wake past the unit's deadline, is posted
// once more a second before it, rather than given up at once: an
// automator back by then (its disk freed) takes it. Before, the proxy
// gave up as soon as the backoff reached past the deadline, up to 15 s
// before it (a review: 11 s).
func TestAResultIsPostedOnceMoreJustBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{Stdout: []byte("done")}, nil
	})
	f := newFake()
	f.completeErr = []error{status.Error(codes.ResourceExhausted, "the automator's database is out of disk space")}
	log := &lockedWriter{b: &bytes.Buffer{}}
	// Every backoff after the failed post wakes past the deadline.
	runPosting(t, f, time.Minute, log)
	// No post outlives the deadline (TestNoResultIsPostedAfterTheDeadline):
	// this one is taken, so it was sent before.
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claimWithin(t, "w1", 3*time.Second)}}
	if got := waittest.Recv(t, f.completed, "the result to be posted once more before the deadline"); got.GetWorkId() != "w1" {
		t.Errorf("posted %s; want w1", got.GetWorkId())
	}
	if strings.Contains(log.String(), "giving up") {
		t.Errorf("the proxy gave the result up:\n%s", log.String())
	}
}

// linkDown answers Complete as gRPC does while its connection is down: a
// call that may fail fast fails at once, Unavailable; one made with
// grpc.WaitForReady waits for the link, until its context ends or the
// link is back (up), and is then taken. It records each call's
// WaitForReady.
type linkDown struct {
	*fakeAutomator
	up      chan struct{}
	mu      sync.Mutex
	waiting []bool
}

func (l *linkDown) Complete(ctx context.Context, in *automatorv1.CompleteRequest, opts ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	waits := false
	for _, o := range opts {
		if f, ok := o.(grpc.FailFastCallOption); ok {
			waits = !f.FailFast
		}
	}
	l.mu.Lock()
	l.waiting = append(l.waiting, waits)
	l.mu.Unlock()
	select {
	case <-l.up:
		return l.fakeAutomator.Complete(ctx, in)
	default:
	}
	if !waits {
		return nil, status.Error(codes.Unavailable, "connection error: dial tcp: i/o timeout")
	}
	select {
	case <-l.up:
		return l.fakeAutomator.Complete(ctx, in)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// TestARetriedResultWaitsForTheLinkToComeBack: a result whose first post
// failed for want of a connection is posted again with grpc.WaitForReady,
// so that it goes out as soon as the link is back, however far its
// backoff has grown; the first post fails fast (a stopping proxy makes it
// with no connection to wait for). Before, every retry failed at once on
// the last dial's error while the connection was still down, and one
// whose backoff reached past the deadline was given up: a review lost the
// result of a partition that healed 3 s before the deadline, every time.
func TestARetriedResultWaitsForTheLinkToComeBack(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{Stdout: []byte("done")}, nil
	})
	l := &linkDown{fakeAutomator: newFake(), up: make(chan struct{})}
	runPosting(t, l, time.Millisecond, &lockedWriter{b: &bytes.Buffer{}})
	l.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claimWithin(t, "w1", time.Minute)}}
	waittest.Until(t, "a retry to wait for the link", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.waiting) >= 2
	})
	close(l.up)
	if got := waittest.Recv(t, l.completed, "the result to be posted once the link is back"); got.GetWorkId() != "w1" {
		t.Fatalf("posted %s; want w1", got.GetWorkId())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting[0] || !l.waiting[1] {
		t.Errorf("the posts waited for the link: %v; want the first to fail fast and the retries to wait", l.waiting)
	}
}

// TestAResultWhosePostFailsInItsLastSecondIsPostedAgain: a result whose
// first post fails less than a second before the deadline is posted again
// after its (short) backoff, as any other, not given up at once: the last
// attempt a second before the deadline is for a backoff that would wake
// past it (a review of that change).
func TestAResultWhosePostFailsInItsLastSecondIsPostedAgain(t *testing.T) {
	t.Parallel()
	const remaining = 2 * time.Second
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		// Ends with well under a second left.
		time.Sleep(remaining - 700*time.Millisecond)
		return runner.Result{Stdout: []byte("done")}, nil
	})
	f := newFake()
	f.completeErr = []error{status.Error(codes.Unavailable, "the automator is restarting")}
	log := &lockedWriter{b: &bytes.Buffer{}}
	runPosting(t, f, 10*time.Millisecond, log)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claimWithin(t, "w1", remaining)}}
	if got := waittest.Recv(t, f.completed, "the result to be posted again in its last second"); got.GetWorkId() != "w1" {
		t.Errorf("posted %s; want w1", got.GetWorkId())
	}
	if strings.Contains(log.String(), "giving up") {
		t.Errorf("the proxy gave the result up:\n%s", log.String())
	}
}

// runPosting runs an agent of one slot on client c, which posts results
// again after a backoff of backoff, logging to log.
func runPosting(t *testing.T, c Client, backoff time.Duration, log *lockedWriter) {
	t.Helper()
	runInBackground(t, New(Options{
		tune:   testTuning(t),
		Client: c, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: backoff, BackoffMax: backoff,
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	}))
}

// TestAResultRecordedAlreadyIsLoggedAsDelivered: a result posted again
// after an attempt whose answer was lost is refused by the automator as
// recorded already (DESIGN.md: a result posted after a terminal state is
// refused); the proxy logs it as delivered, at Info, and posts it no
// more. Before, it logged a WARN "result refused by the automator" for a
// delivered result (a review: 8 such lines at 50 % loss, 4 of them units
// that had succeeded).
func TestAResultRecordedAlreadyIsLoggedAsDelivered(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{Stdout: []byte("done")}, nil
	})
	f := newFake()
	f.completeErr = []error{status.Error(codes.FailedPrecondition, `work "w1" is succeeded: `+grpcwire.ResultRecordedAlready)}
	log := &lockedWriter{b: &bytes.Buffer{}}
	runPosting(t, f, time.Millisecond, log)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claimWithin(t, "w1", time.Minute)}}
	waittest.Until(t, "the result to be logged as recorded already", func() bool {
		return strings.Contains(log.String(), `level=INFO msg="result recorded by an earlier attempt, whose answer was lost"`)
	})
	if l := log.String(); strings.Contains(l, "refused") && strings.Contains(l, "level=WARN") {
		t.Errorf("a result recorded already was logged as refused:\n%s", l)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.completes) != 1 {
		t.Errorf("posted %d times; want once, then no more", len(f.completes))
	}
}
