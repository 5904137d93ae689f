package agent

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

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

// TestAScriptKilledAtTheDeadlineIsNotReported (guarantee 7): when the run
// ends at the deadline (the runner killed the tree), the proxy posts
// nothing: the unit is the automator's to time out.
func TestAScriptKilledAtTheDeadlineIsNotReported(t *testing.T) {
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
