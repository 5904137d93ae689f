package agent

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

// stopAsAnsweredAutomator answers the first poll with a claim, and asks the
// agent to stop (SIGTERM) just before the answer is returned: the stop and
// the answer cross. Later polls wait for their context.
type stopAsAnsweredAutomator struct {
	*fakeAutomator
	stop  func()
	claim *automatorv1.Claim
	once  sync.Once
}

func (s *stopAsAnsweredAutomator) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	var resp *automatorv1.PollResponse
	s.once.Do(func() {
		s.stop()
		resp = &automatorv1.PollResponse{Claims: []*automatorv1.Claim{s.claim}}
	})
	if resp != nil {
		return resp, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestAClaimReceivedAsTheProxyStopsIsRunOrReported: a poll's answer that
// arrives as the proxy is asked to stop hands it a unit that the automator
// recorded as claimed by this instance, and that no other instance will
// ever run (guarantee 1). The stopping agent must run it within its grace
// period, or at least report it failed: dropping it silently leaves the
// caller waiting for the unit's deadline (5 minutes by default) for a
// timeout, with nothing in the log.
func TestAClaimReceivedAsTheProxyStopsIsRunOrReported(t *testing.T) {
	t.Parallel()
	ran := make(chan string, 1)
	useRunner(t, func(_ context.Context, s runner.Spec) (runner.Result, error) {
		ran <- s.Env["PROXY_WORK_ID"]
		return runner.Result{Stdout: []byte("done")}, nil
	})
	// Its later polls, the stop's among them, get no answer: the stop's
	// bound is not what it is about.
	shortReportLost(t)
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &stopAsAnsweredAutomator{fakeAutomator: f, stop: cancel, claim: claim(t, "w1", &automatorv1.Command{Script: "s"})}
	var log bytes.Buffer
	a := New(Options{
		tune:   testTuning(t),
		Client: s, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{b: &log}, nil)),
	})
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(ran) == 0 && len(f.completes) == 0 {
		t.Fatal("the unit claimed in the answer that crossed the stop was neither run nor reported: it is left to time out")
	}
}
