package agent

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

// TestAResultRefusedAfterATerminalStateIsLoggedAndNotPostedAgain: the
// automator refuses a result for a unit that already ended
// (FAILED_PRECONDITION); the proxy logs the refusal and gives the result
// up, rather than post it again.
func TestAResultRefusedAfterATerminalStateIsLoggedAndNotPostedAgain(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{Stdout: []byte("late")}, nil
	})
	f := newFake()
	f.completeErr = []error{status.Error(codes.FailedPrecondition, `work "w1" is cancelled; result refused`)}
	var log bytes.Buffer
	stop := startAgent(t, f, 1, &log)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "s"})}}
	waittest.Until(t, "the result to be posted", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.completes) > 0 })
	stop() // waits for the unit's goroutine, and so for its posts

	f.mu.Lock()
	n := len(f.completes)
	f.mu.Unlock()
	if n != 1 {
		t.Errorf("%d Complete calls, want 1: a refused result is not posted again", n)
	}
	if out := log.String(); !strings.Contains(out, "result refused by the automator") || !strings.Contains(out, "work_id=w1") || !strings.Contains(out, "cancelled; result refused") {
		t.Errorf("the log does not say the automator refused w1's result, and why:\n%s", out)
	}
}
