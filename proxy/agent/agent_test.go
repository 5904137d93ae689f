package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(lockHolderEnv); dir != "" {
		os.Exit(holdStateDir(dir)) // a child of TestStateDirIsFreedWhenItsHolderIsKilled
	}
	if spec := os.Getenv(ShortProxyEnv); spec != "" {
		os.Exit(runShortProxy(spec)) // a proxy process of shortage_linux_test.go
	}
	goleak.VerifyTestMain(m)
}

// fakeAutomator implements Client behind the agent's narrow interface: each
// Poll takes the next scripted response (or waits for ctx), each Complete is
// recorded and answered by completeErr.
type fakeAutomator struct {
	responses chan *automatorv1.PollResponse
	pollErr   error

	mu          sync.Mutex
	polls       []*automatorv1.PollRequest
	completes   []*automatorv1.CompleteRequest
	completeErr []error // consumed in order; nil afterwards
	completed   chan *automatorv1.CompleteRequest
}

func newFake() *fakeAutomator {
	return &fakeAutomator{responses: make(chan *automatorv1.PollResponse, 16), completed: make(chan *automatorv1.CompleteRequest, 16)}
}

func (f *fakeAutomator) Poll(ctx context.Context, in *automatorv1.PollRequest, _ ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	f.mu.Lock()
	f.polls = append(f.polls, proto.Clone(in).(*automatorv1.PollRequest))
	err := f.pollErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if in.GetMaxUnits() == 0 && in.GetWait().AsDuration() == 0 {
		// A poll for nothing that does not wait (a stopping agent's report
		// of a poll it cancelled) is answered at once, as the automator
		// does; waiting for ctx would hold every stop for its bound.
		return &automatorv1.PollResponse{}, nil
	}
	select {
	case r := <-f.responses:
		return r, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (f *fakeAutomator) Complete(ctx context.Context, in *automatorv1.CompleteRequest, _ ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	f.mu.Lock()
	f.completes = append(f.completes, in)
	var err error
	if len(f.completeErr) > 0 {
		err, f.completeErr = f.completeErr[0], f.completeErr[1:]
	}
	f.mu.Unlock()
	if err == nil {
		f.completed <- in
		return &automatorv1.CompleteResponse{}, nil
	}
	return nil, err
}

func (f *fakeAutomator) lastPoll() *automatorv1.PollRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.polls) == 0 {
		return nil
	}
	return f.polls[len(f.polls)-1]
}

// blockingRunner stands in for runner.Run: each run records its work id and
// blocks until released or its context ends.
type blockingRunner struct {
	mu      sync.Mutex
	started []string
	release chan struct{}
	ended   chan error
}

func (b *blockingRunner) run(ctx context.Context, s runner.Spec) (runner.Result, error) {
	b.mu.Lock()
	b.started = append(b.started, s.Env["PROXY_WORK_ID"])
	b.mu.Unlock()
	select {
	case <-b.release:
		b.ended <- nil
		return runner.Result{Stdout: []byte("done")}, nil
	case <-ctx.Done():
		b.ended <- ctx.Err()
		return runner.Result{}, runner.ErrCancelled
	}
}

func (b *blockingRunner) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.started)
}

// tunes holds each test's tuning of the agents it makes (useRunner,
// shortReportLost), read by testTuning: per test, not per package, so that
// the tests run in parallel.
var tunes sync.Map // *testing.T → *tuning

// tuned is t's tuning, for useRunner and shortReportLost to change before
// the test makes its agents.
func tuned(t *testing.T) *tuning {
	v, loaded := tunes.LoadOrStore(t, &tuning{})
	if !loaded {
		t.Cleanup(func() { tunes.Delete(t) })
	}
	return v.(*tuning)
}

// testTuning is the tuning of the agents t makes (Options.tune).
func testTuning(t *testing.T) tuning {
	if v, ok := tunes.Load(t); ok {
		return *v.(*tuning)
	}
	return tuning{}
}

// useRunner makes the agents t makes run f instead of runner.Run.
func useRunner(t *testing.T, f func(context.Context, runner.Spec) (runner.Result, error)) {
	tuned(t).runScript = f
}

// shortReportLost bounds a stopping agent's report of its lost polls by
// 100 ms for the test: for the tests whose stop has no automator to reach,
// or one that no longer answers, which would otherwise wait out the 5 s
// bound (10 s, stopHeardWithin, after an answered poll).
func shortReportLost(t *testing.T) {
	tn := tuned(t)
	tn.reportLostWithin, tn.stopHeardWithin = 100*time.Millisecond, 100*time.Millisecond
}

var testKey = func() crypto.Key {
	k, _ := crypto.NewKey(1)
	return k
}()

func claim(t *testing.T, id string, cmd *automatorv1.Command) *automatorv1.Claim {
	t.Helper()
	plain, _ := proto.Marshal(cmd)
	sealed, err := crypto.Seal(testKey, "acme", id, crypto.DirCommand, plain)
	if err != nil {
		t.Fatal(err)
	}
	return &automatorv1.Claim{WorkId: id, ClaimId: "c-" + id, Account: "acme", SealedCommand: sealed, Remaining: durationpb.New(time.Minute)}
}

func startAgent(t *testing.T, f Client, max int, log *bytes.Buffer) (stop func()) {
	t.Helper()
	var w = &lockedWriter{b: log}
	if log == nil {
		w = &lockedWriter{b: &bytes.Buffer{}}
	}
	a := New(Options{
		tune:   testTuning(t),
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: max, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(w, nil)),
	})
	return runInBackground(t, a)
}

type lockedWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestPollAsksOnlyForFreeSlots: with both slots busy the agent asks for no
// units (but still lists what it runs); when one frees it asks for one.
func TestPollAsksOnlyForFreeSlots(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	useRunner(t, b.run)
	f := newFake()
	startAgent(t, f, 2, nil)
	waittest.Until(t, "first poll", func() bool { p := f.lastPoll(); return p != nil && p.GetMaxUnits() == 2 })
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{
		claim(t, "w1", &automatorv1.Command{Script: "s"}), claim(t, "w2", &automatorv1.Command{Script: "s"}),
	}}
	waittest.Until(t, "both running", func() bool { return b.count() == 2 })
	waittest.Until(t, "a poll for no units listing both", func() bool {
		p := f.lastPoll()
		return p.GetMaxUnits() == 0 && len(p.GetRunning()) == 2
	})
	b.release <- struct{}{}
	waittest.Recv(t, f.completed, "the result of the first released unit to be posted")
	waittest.Until(t, "a poll for one unit", func() bool { p := f.lastPoll(); return p.GetMaxUnits() == 1 && len(p.GetRunning()) == 1 })
	b.release <- struct{}{}
	waittest.Recv(t, f.completed, "the result of the second released unit to be posted")
}

// TestCancelledUnitIsKilledAndNothingReported: when the automator says a
// running unit ended, its run is cancelled and no result is posted.
func TestCancelledUnitIsKilledAndNothingReported(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	useRunner(t, b.run)
	f := newFake()
	stop := startAgent(t, f, 1, nil)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "s"})}}
	waittest.Until(t, "running", func() bool { return b.count() == 1 })
	f.responses <- &automatorv1.PollResponse{Cancelled: []string{"w1"}}
	if err := waittest.Recv(t, b.ended, "the run of w1 to end after the automator answered a poll saying w1 was cancelled"); err == nil {
		t.Fatal("run was not cancelled")
	}
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.completes) != 0 {
		t.Fatalf("posted %d results for a cancelled unit, want none", len(f.completes))
	}
}

// crossingAutomator answers the first poll for no units only once the
// agent has dropped it, after calling freeSlot: the answer and the drop
// cross. Other polls go to the fakeAutomator.
type crossingAutomator struct {
	*fakeAutomator
	freeSlot func()
	answer   *automatorv1.PollResponse
	once     sync.Once
}

func (c *crossingAutomator) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	crossed := false
	if in.GetMaxUnits() == 0 {
		c.once.Do(func() {
			c.freeSlot()
			<-ctx.Done() // the agent drops the poll
			crossed = true
		})
	}
	if crossed {
		return c.answer, nil
	}
	return c.fakeAutomator.Poll(ctx, in, opts...)
}

// TestCancellationInTheAnswerOfADroppedPollIsKept: with every slot busy
// the agent polls for no units and drops that poll when a slot frees; an
// answer that arrives as it drops it, saying a running unit was cancelled,
// still cancels it (or it would run on until the automator repeats it).
func TestCancellationInTheAnswerOfADroppedPollIsKept(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	useRunner(t, b.run)
	f := newFake()
	c := &crossingAutomator{
		fakeAutomator: f,
		freeSlot:      func() { b.release <- struct{}{} }, // one of the two units ends
		// Whichever is still running is cancelled.
		answer: &automatorv1.PollResponse{Cancelled: []string{"w1", "w2"}},
	}
	startAgent(t, c, 2, nil)
	waittest.Until(t, "first poll", func() bool { p := f.lastPoll(); return p != nil && p.GetMaxUnits() == 2 })
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{
		claim(t, "w1", &automatorv1.Command{Script: "s"}), claim(t, "w2", &automatorv1.Command{Script: "s"}),
	}}
	if err := waittest.Recv(t, b.ended, "the released unit's run to end"); err != nil {
		t.Fatalf("the released unit: %v", err)
	}
	waittest.Recv(t, f.completed, "the released unit's result to be posted")
	select {
	case err := <-b.ended:
		if err == nil {
			t.Fatal("the other unit ended without being cancelled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other unit was not cancelled: the cancellation in the dropped poll's answer was lost")
	}
}

// TestASecondStopEndsPostingWithoutASpool: without a spool, a stopping
// agent keeps posting a result the automator does not take (here it is
// unavailable) until the unit's deadline; a second stop ends that too, and
// the result is logged as lost.
func TestASecondStopEndsPostingWithoutASpool(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	useRunner(t, b.run)
	f := newFake()
	for range 10000 {
		f.completeErr = append(f.completeErr, status.Error(codes.Unavailable, "automator down"))
	}
	log := &lockedWriter{b: &bytes.Buffer{}}
	endGrace := make(chan struct{})
	a := New(Options{
		tune:   testTuning(t),
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: time.Hour, EndGrace: endGrace,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "s"})}}
	waittest.Until(t, "running", func() bool { return b.count() == 1 })
	b.release <- struct{}{}
	waittest.Until(t, "a failed post", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.completes) > 0 })
	cancel()
	select {
	case endGrace <- struct{}{}: // taken by Run as it waits for the posts
	case <-time.After(10 * time.Second):
		t.Fatal("the stopping agent never took the second stop")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the second stop; it posts until the unit's deadline")
	}
	if !strings.Contains(log.String(), "it is lost (no state_dir, so no spool)") {
		t.Errorf("the log does not say the result was lost:\n%s", log.String())
	}
}

// TestTamperedCommandRunsNothing: a sealed command that does not open is
// reported failed with a clear reason, and nothing runs.
func TestTamperedCommandRunsNothing(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	useRunner(t, b.run)
	f := newFake()
	startAgent(t, f, 1, nil)
	c := claim(t, "w1", &automatorv1.Command{Script: "s"})
	c.SealedCommand[len(c.SealedCommand)-3] ^= 0x40
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{c}}
	got := waittest.Recv(t, f.completed, "the tampered unit to be reported failed")
	if got.GetOutcome() != automatorv1.Outcome_OUTCOME_FAILED || !strings.Contains(got.GetFailure(), "did not open") {
		t.Fatalf("completed %v %q, want FAILED saying the command did not open", got.GetOutcome(), got.GetFailure())
	}
	if b.count() != 0 {
		t.Fatal("a command that did not open was run")
	}
}

// TestResultIsRetriedUntilAccepted: an unreachable automator does not lose a
// result; the agent posts again with backoff.
func TestResultIsRetriedUntilAccepted(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{ExitCode: 7, Stdout: []byte("out")}, nil
	})
	f := newFake()
	f.completeErr = []error{status.Error(codes.Unavailable, "down"), status.Error(codes.Unavailable, "down")}
	startAgent(t, f, 1, nil)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "s"})}}
	got := waittest.Recv(t, f.completed, "the result refused twice to be posted a third time and accepted")
	f.mu.Lock()
	n := len(f.completes)
	f.mu.Unlock()
	if n != 3 {
		t.Fatalf("%d Complete calls, want 3 (two refused, one accepted)", n)
	}
	plain, err := crypto.Open(crypto.Keys{testKey}, "acme", "w1", crypto.DirResult, got.GetSealedResult())
	if err != nil {
		t.Fatal(err)
	}
	var r automatorv1.Result
	proto.Unmarshal(plain, &r)
	if r.GetExitCode() != 7 || string(r.GetStdout()) != "out" || r.GetInstanceId() != "a" {
		t.Fatalf("result %v", &r)
	}
}

// TestRefusedTokenIsLoggedOnce: many failed polls, one log line.
func TestRefusedTokenIsLoggedOnce(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.pollErr = status.Error(codes.Unauthenticated, "invalid account token")
	var log bytes.Buffer
	stop := startAgent(t, f, 1, &log)
	waittest.Until(t, "10 attempts", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.polls) >= 10 })
	stop()
	if n := strings.Count(log.String(), "refused this proxy's token"); n != 1 {
		t.Fatalf("%d log lines about the token over 10+ attempts, want 1:\n%s", n, log.String())
	}
}

func TestBuiltinPingNamesTheInstance(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{}, errors.New("a built-in must not start a process")
	})
	f := newFake()
	startAgent(t, f, 1, nil)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "@ping"})}}
	got := waittest.Recv(t, f.completed, "the result of @ping to be posted")
	plain, _ := crypto.Open(crypto.Keys{testKey}, "acme", "w1", crypto.DirResult, got.GetSealedResult())
	var r automatorv1.Result
	proto.Unmarshal(plain, &r)
	if got.GetOutcome() != automatorv1.Outcome_OUTCOME_SUCCEEDED || !strings.Contains(string(r.GetStdout()), "instance_id=a\n") {
		t.Fatalf("@ping: %v %q", got.GetOutcome(), r.GetStdout())
	}
}

// openedResult opens the result of unit id (of account acme, sealed with
// testKey) that got posts.
func openedResult(t *testing.T, id string, got *automatorv1.CompleteRequest) *automatorv1.Result {
	t.Helper()
	plain, err := crypto.Open(crypto.Keys{testKey}, "acme", id, crypto.DirResult, got.GetSealedResult())
	if err != nil {
		t.Fatalf("%s: the result does not open: %v", id, err)
	}
	var r automatorv1.Result
	if err := proto.Unmarshal(plain, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestAnUnknownBuiltinSaysNamesBeginningWithAtAreTheProxys: a script
// deployed as "@mine" is never run; the failure says why (a review).
func TestAnUnknownBuiltinSaysNamesBeginningWithAtAreTheProxys(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{}, errors.New("a built-in must not start a process")
	})
	f := newFake()
	startAgent(t, f, 1, nil)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "@mine"})}}
	got := waittest.Recv(t, f.completed, "the failure of @mine to be posted")
	r := openedResult(t, "w1", got)
	if want := `unknown built-in command "@mine" (built-ins: @ping; names beginning with @ are the proxy's own, never a script's)`; got.GetOutcome() != automatorv1.Outcome_OUTCOME_FAILED || !strings.Contains(r.GetFailure(), want) {
		t.Errorf("@mine: %v %q; want it failed, saying %q", got.GetOutcome(), r.GetFailure(), want)
	}
}

// TestBuiltinPingRefusesWhatItWouldIgnore: arguments, stdin or variables
// given to @ping fail the unit, saying so, rather than being dropped.
func TestBuiltinPingRefusesWhatItWouldIgnore(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{}, errors.New("a built-in must not start a process")
	})
	for i, cmd := range []*automatorv1.Command{
		{Script: "@ping", Args: []string{"host-a"}},
		{Script: "@ping", Stdin: []byte("x")},
		{Script: "@ping", Env: map[string]string{"K": "V"}},
	} {
		// An agent each: one that ran a unit may have a poll for no
		// units waiting, which would take the next claim as one it did
		// not ask for (and not run it).
		f := newFake()
		startAgent(t, f, 1, nil)
		id := fmt.Sprintf("w%d", i)
		f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, id, cmd)}}
		got := waittest.Recv(t, f.completed, "the result of @ping to be posted")
		r := openedResult(t, id, got)
		if got.GetOutcome() != automatorv1.Outcome_OUTCOME_FAILED || r.GetFailure() != "@ping takes no arguments, stdin or environment variables" {
			t.Errorf("%v: %v %q; want it failed, saying what @ping takes", cmd, got.GetOutcome(), r.GetFailure())
		}
	}
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	t.Parallel()
	b := backoff{min: 100 * time.Millisecond, max: time.Second}
	seen := map[time.Duration]bool{}
	for range 50 {
		d := b.next()
		if d < 50*time.Millisecond || d > time.Second {
			t.Fatalf("delay %v outside [50ms, 1s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct delays: not jittered", len(seen))
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Fatalf("after reset: %v, want <= 100ms", d)
	}
}

// FuzzOpenCommand: arbitrary claims never panic the decoder, and only a
// blob sealed for this unit, account and direction opens.
func FuzzOpenCommand(f *testing.F) {
	plain, _ := proto.Marshal(&automatorv1.Command{Script: "s.sh", Args: []string{"a"}, Env: map[string]string{"K": "V"}})
	good, _ := crypto.Seal(testKey, "acme", "w1", crypto.DirCommand, plain)
	f.Add("acme", "w1", good)
	f.Add("acme", "w2", good)
	f.Add("acme", "w1", []byte{1, 0, 0, 0, 1})
	f.Add("", "", []byte{})
	f.Fuzz(func(t *testing.T, account, id string, blob []byte) {
		cmd, err := openCommand(crypto.Keys{testKey}, &automatorv1.Claim{Account: account, WorkId: id, SealedCommand: blob})
		if err != nil {
			return
		}
		if account != "acme" || id != "w1" || cmd.GetScript() != "s.sh" {
			t.Fatalf("opened a command for %q/%q: %v", account, id, cmd)
		}
	})
}

// TestResultIsPostedWhenTheSpoolCannotBeWritten: a spool that cannot be
// written (its directory would have to be made inside a file) does not hold
// results back: each is posted from memory, the failure is logged once, and
// the proxy stops cleanly with nothing left running.
func TestResultIsPostedWhenTheSpoolCannotBeWritten(t *testing.T) {
	t.Parallel()
	quickScript(t)
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := newStageHook()
	// The automator answers each result only once its write has failed, so
	// that every write is attempted.
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error {
		if err := h.reached(stageDone); err != nil {
			t.Error(err)
		}
		return nil
	})
	var log bytes.Buffer
	a := New(Options{
		tune:   testTuning(t),
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(&lockedWriter{b: &log}, nil)),
		SpoolDir: filepath.Join(notADir, "spool"),
	})
	a.spool.hook = h.hook
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() { cancel(); waittest.Recv(t, done, "the agent's Run to return after its context was cancelled") })
	}
	t.Cleanup(stop)
	for _, id := range []string{"w1", "w2"} {
		f.claims <- claim(t, id, &automatorv1.Command{Script: "s"})
		if got := waittest.Recv(t, f.ok, "the result of "+id+" to be posted"); got.GetWorkId() != id || got.GetOutcome() != automatorv1.Outcome_OUTCOME_SUCCEEDED {
			t.Fatalf("posted %q %v, want %s succeeded", got.GetWorkId(), got.GetOutcome(), id)
		}
	}
	stop()
	if n := strings.Count(log.String(), "cannot keep results in the spool"); n != 1 {
		t.Fatalf("%d log lines about the spool for 2 failed writes, want 1:\n%s", n, log.String())
	}
}

// scriptedPolls answers the agent's polls in order from answers (an error
// or a response), records each request on polls, and blocks once they run
// out.
type scriptedPolls struct {
	answers []error // nil: an empty answer
	polls   chan *automatorv1.PollRequest
	n       atomic.Int32
}

func (s *scriptedPolls) Poll(ctx context.Context, in *automatorv1.PollRequest, _ ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	n := int(s.n.Add(1)) - 1
	s.polls <- proto.Clone(in).(*automatorv1.PollRequest)
	if n >= len(s.answers) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err := s.answers[n]; err != nil {
		return nil, err
	}
	return &automatorv1.PollResponse{}, nil
}

func (s *scriptedPolls) Complete(context.Context, *automatorv1.CompleteRequest, ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	return &automatorv1.CompleteResponse{}, nil
}

// TestPollsAreNumberedAndSayFromWhichTheAnswersWereLost: the agent numbers
// its polls, and after polls that failed on its side (their answers, and
// any units claimed for them, never arrived) each poll names the first of
// them (lost_from), until one is answered: the automator then fails those
// units at once rather than at their deadline.
func TestPollsAreNumberedAndSayFromWhichTheAnswersWereLost(t *testing.T) {
	t.Parallel()
	gone := status.Error(codes.Unavailable, "connection lost")
	f := &scriptedPolls{answers: []error{nil, gone, gone, nil, nil}, polls: make(chan *automatorv1.PollRequest, 16)}
	shortReportLost(t) // the stop's report gets no answer: its last poll was never answered
	stop := startAgent(t, f, 2, nil)
	var got []*automatorv1.PollRequest
	for len(got) < 6 {
		got = append(got, waittest.Recv(t, f.polls, "the agent's next poll"))
	}
	stop()
	want := [][2]uint64{{1, 0}, {2, 0}, {3, 2}, {4, 2}, {5, 0}, {6, 0}} // poll_seq, lost_from
	for i, p := range got {
		if p.GetPollSeq() != want[i][0] || p.GetLostFrom() != want[i][1] || p.GetRunId() != got[0].GetRunId() || p.GetRunId() == "" {
			t.Errorf("poll %d: poll_seq %d, lost_from %d, run %q; want %d, %d, the run of the first (%q)",
				i+1, p.GetPollSeq(), p.GetLostFrom(), p.GetRunId(), want[i][0], want[i][1], got[0].GetRunId())
		}
	}
}

// slowKillRunner stands in for runner.Run: a run blocks until its context
// ends, says so on cancelled, and then returns only once let go, as a
// script whose process tree takes a while to die.
type slowKillRunner struct {
	started   chan string
	cancelled chan string
	letGo     chan struct{}
}

func (r *slowKillRunner) run(ctx context.Context, s runner.Spec) (runner.Result, error) {
	r.started <- s.Env["PROXY_WORK_ID"]
	<-ctx.Done()
	r.cancelled <- s.Env["PROXY_WORK_ID"]
	<-r.letGo
	return runner.Result{}, runner.ErrCancelled
}

// TestAUnitToldEndedIsNoLongerListedWhileItsScriptIsKilled: once the
// automator said a running unit ended, the agent's polls stop listing it,
// though its script is still being killed: the automator, which said it,
// would only say it again.
func TestAUnitToldEndedIsNoLongerListedWhileItsScriptIsKilled(t *testing.T) {
	t.Parallel()
	r := &slowKillRunner{started: make(chan string, 2), cancelled: make(chan string, 2), letGo: make(chan struct{})}
	useRunner(t, r.run)
	f := newFake()
	startAgent(t, f, 2, nil)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{
		claim(t, "w1", &automatorv1.Command{Script: "s"}), claim(t, "w2", &automatorv1.Command{Script: "s"}),
	}}
	waittest.Recv(t, r.started, "the first unit to start")
	waittest.Recv(t, r.started, "the second unit to start")
	waittest.Until(t, "a poll listing both", func() bool { return len(f.lastPoll().GetRunning()) == 2 })
	f.mu.Lock()
	polls := len(f.polls) // the last one waits for this answer
	f.mu.Unlock()
	f.responses <- &automatorv1.PollResponse{Cancelled: []string{"w1"}}
	if id := waittest.Recv(t, r.cancelled, "the cancelled unit's run to be cancelled"); id != "w1" {
		t.Fatalf("%s was cancelled, want w1", id)
	}
	waittest.Until(t, "the poll after the answer", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.polls) > polls })
	if got := f.lastPoll().GetRunning(); len(got) != 1 || got[0] != "w2" {
		t.Errorf("the poll after w1 was said to have ended, while its script is still being killed, lists %v; want [w2]", got)
	}
	close(r.letGo)
	f.responses <- &automatorv1.PollResponse{Cancelled: []string{"w2"}}
	waittest.Recv(t, r.cancelled, "the second unit's run to be cancelled")
}

// TestClaimArrivingPastItsDeadlineRunsAndReportsNothing: a claim whose time
// remaining is zero or less when it arrives (the automator's answer came
// late) runs nothing, not even a built-in, and reports nothing (guarantee
// 7): the automator has timed it out, or will at once.
func TestClaimArrivingPastItsDeadlineRunsAndReportsNothing(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	close(b.release)
	useRunner(t, b.run)
	shortReportLost(t) // its stop's poll, which slotPolls leaves unanswered, is not what it is about
	f := newFake()
	var log bytes.Buffer
	stop := startAgent(t, slotPolls{f}, 1, &log)
	late := []*automatorv1.Claim{
		claim(t, "w-ping", &automatorv1.Command{Script: "@ping"}),
		claim(t, "w-script", &automatorv1.Command{Script: "s"}),
		claim(t, "w-sealed", &automatorv1.Command{Script: "s"}),
	}
	late[0].Remaining = durationpb.New(0)
	late[1].Remaining = durationpb.New(-time.Second)
	late[2].Remaining = durationpb.New(-time.Millisecond)
	late[2].SealedCommand[len(late[2].SealedCommand)-3] ^= 0x40
	for _, c := range late {
		f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{c}}
	}
	// One slot: each claim comes once the one before it is handled.
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w-on-time", &automatorv1.Command{Script: "s"})}}
	got := waittest.Recv(t, f.completed, "the unit on time to be reported")
	if got.GetWorkId() != "w-on-time" {
		t.Fatalf("%s was reported; a claim that arrived past its deadline must report nothing", got.GetWorkId())
	}
	f.mu.Lock()
	n := len(f.completes)
	f.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d Complete calls, want 1 (the unit on time only)", n)
	}
	if b.count() != 1 {
		t.Fatalf("%d scripts run, want 1 (the unit on time only)", b.count())
	}
	stop()
	if c := strings.Count(log.String(), "arrived past its deadline"); c != 3 {
		t.Fatalf("%d log lines say a claim arrived past its deadline, want 3:\n%s", c, log.String())
	}
}

// slotPolls answers only polls that ask for units, as the automator does:
// a poll for none (every slot busy) takes no claim meant for the next.
type slotPolls struct{ *fakeAutomator }

func (s slotPolls) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	if in.GetMaxUnits() == 0 {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return s.fakeAutomator.Poll(ctx, in, opts...)
}

// TestScriptIsToldTheWholeSecondsRemainingRoundedDown: PROXY_DEADLINE_SECONDS
// is the time remaining in whole seconds, rounded down, so a script that
// keeps within it finishes before it is killed: 0 with under a second
// left, 299 (not 300) with 300 seconds less the time the claim took to
// reach the script.
func TestScriptIsToldTheWholeSecondsRemainingRoundedDown(t *testing.T) {
	// Not parallel: a claim with 900 ms left must reach the script within
	// 900 ms, which the load of the other tests could make it miss.
	// Its stop, whose poll slotPolls leaves unanswered, is bounded by
	// 100 ms rather than 1, 5 or 10 s: the test runs alone, and is not
	// about it.
	tn := tuned(t)
	tn.reportLostWithin, tn.stopSaidWithin, tn.stopHeardWithin = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	told := make(chan string, 3)
	useRunner(t, func(_ context.Context, s runner.Spec) (runner.Result, error) {
		told <- s.Env["PROXY_DEADLINE_SECONDS"]
		return runner.Result{}, nil
	})
	f := newFake()
	startAgent(t, slotPolls{f}, 1, nil)
	for _, tc := range []struct {
		remaining time.Duration
		want      string
	}{{900 * time.Millisecond, "0"}, {1900 * time.Millisecond, "1"}, {300 * time.Second, "299"}} {
		c := claim(t, "w-"+tc.remaining.String(), &automatorv1.Command{Script: "s"})
		c.Remaining = durationpb.New(tc.remaining)
		f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{c}}
		if got := waittest.Recv(t, told, "the script to be run"); got != tc.want {
			t.Errorf("with %v remaining, PROXY_DEADLINE_SECONDS=%s, want %s", tc.remaining, got, tc.want)
		}
		waittest.Recv(t, f.completed, "its result to be posted")
	}
}

// TestClaimsBeyondTheFreeSlotsAreNotRun: an answer with more claims than
// the poll asked for (from a broken or hostile automator) runs only as many
// as the agent has free slots, and says so in the log: max_concurrent
// bounds the scripts running here whatever the automator sends.
func TestClaimsBeyondTheFreeSlotsAreNotRun(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	useRunner(t, b.run)
	f := newFake()
	var log bytes.Buffer
	stop := startAgent(t, f, 2, &log)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{
		claim(t, "w1", &automatorv1.Command{Script: "s"}), claim(t, "w2", &automatorv1.Command{Script: "s"}),
		claim(t, "w3", &automatorv1.Command{Script: "s"}),
	}}
	waittest.Until(t, "two units to run", func() bool { return b.count() >= 2 })
	for range 2 {
		b.release <- struct{}{}
		waittest.Recv(t, f.completed, "a result to be posted")
	}
	stop()
	f.mu.Lock()
	asked := f.polls[0].GetMaxUnits()
	f.mu.Unlock()
	if asked != 2 {
		t.Fatalf("the first poll asked for %d units, want 2 (the test relies on it)", asked)
	}
	b.mu.Lock()
	started := slices.Clone(b.started)
	b.mu.Unlock()
	if len(started) != 2 {
		t.Fatalf("ran %v for an answer of 3 claims to a poll asking for 2; want 2 of them run", started)
	}
	if !strings.Contains(log.String(), "more claims than free slots") {
		t.Errorf("the claim past the free slots was not logged:\n%s", log.String())
	}
}

// TestClaimForAUnitAlreadyRunningIsNotRunAgain: a claim for a unit the
// agent runs already (twice in one answer, from a broken or hostile
// automator) is logged and not run: a unit's script runs at most once on
// an instance, and the slot count stays true.
func TestClaimForAUnitAlreadyRunningIsNotRunAgain(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	useRunner(t, b.run)
	f := newFake()
	var log bytes.Buffer
	stop := startAgent(t, f, 2, &log)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{
		claim(t, "w1", &automatorv1.Command{Script: "s"}), claim(t, "w1", &automatorv1.Command{Script: "s"}),
	}}
	// The claims of an answer are all started (or refused) before the
	// next poll is sent.
	waittest.Until(t, "the poll after the answer", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.polls) >= 2
	})
	waittest.Until(t, "w1 to run", func() bool { return b.count() >= 1 })
	b.release <- struct{}{}
	waittest.Recv(t, f.completed, "the result of w1 to be posted")
	stop()
	if !strings.Contains(log.String(), "already running here") {
		t.Errorf("the second claim of w1 was not logged:\n%s", log.String())
	}
	if n := b.count(); n != 1 {
		t.Fatalf("w1 ran %d times, want once", n)
	}
}

// runInBackground runs a until stop, which cancels its context and waits
// for Run to return; it is called at t's end too.
func runInBackground(t *testing.T, a *Agent) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() { cancel(); waittest.Recv(t, done, "the agent's Run to return after its context was cancelled") })
	}
	t.Cleanup(stop)
	return stop
}
