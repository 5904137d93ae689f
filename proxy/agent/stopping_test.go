package agent

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestAStoppingAgentSaysSoInAPollEvenWithNothingToReport: a proxy stopped
// gracefully with nothing running and no poll's answer lost (here it was
// between polls, backing off after a refusal) still polls once more, for
// no units and without waiting, saying it is stopping: the automator shows
// the instance stopped at once, not online for two more poll windows. No
// poll before the stop says so.
func TestAStoppingAgentSaysSoInAPollEvenWithNothingToReport(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.pollErr = status.Error(codes.Unauthenticated, "token refused")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &lockedWriter{b: &bytes.Buffer{}}
	a := New(Options{
		tune:   testTuning(t),
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: time.Second,
		BackoffMin: time.Hour, BackoffMax: time.Hour, // one refused poll, then a long sleep
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	})
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	// The refusal is logged as the loop goes to sleep.
	waittest.Until(t, "the first poll's refusal in the log", func() bool { return strings.Contains(log.String(), "token refused") })
	f.mu.Lock()
	f.pollErr = nil // the automator takes it again
	f.mu.Unlock()
	cancel()
	waittest.Recv(t, done, "Run to return after its context was cancelled")

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.polls) != 2 {
		t.Fatalf("%d polls, want 2: the one refused, then one saying the proxy stops", len(f.polls))
	}
	if first := f.polls[0]; first.GetStopping() {
		t.Errorf("the poll before the stop says it is stopping")
	}
	last := f.polls[1]
	if !last.GetStopping() || last.GetMaxUnits() != 0 || last.GetWait().AsDuration() != 0 || last.GetLostFrom() != 0 ||
		last.GetRunId() != f.polls[0].GetRunId() || last.GetPollSeq() <= f.polls[0].GetPollSeq() {
		t.Errorf("the stop's poll: stopping %v, max_units %d, wait %v, lost_from %d, run %q seq %d; want stopping, 0 units, no wait, nothing lost, the run's next poll after %q seq %d",
			last.GetStopping(), last.GetMaxUnits(), last.GetWait().AsDuration(), last.GetLostFrom(), last.GetRunId(), last.GetPollSeq(),
			f.polls[0].GetRunId(), f.polls[0].GetPollSeq())
	}
}
