package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAGracePeriodThatEndsWithOnlyUnpostedResultsKillsNothing: a proxy
// stopped while the automator is unreachable, its script already over and
// its result not posted, waits out the grace period trying to post. Its
// log then says that no script is running, not that it kills running
// units: an operator reading "killing running units" would think a script
// was cut short (it once did).
func TestAGracePeriodThatEndsWithOnlyUnpostedResultsKillsNothing(t *testing.T) {
	t.Parallel()
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	down := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return status.Error(codes.Unavailable, "down") })
	h := newStageHook()
	var logs logtest.Buffer
	a := New(Options{
		tune:   testTuning(t),
		Client: down, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 20 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		SpoolDir: dir,
	})
	a.spool.hook = h.hook
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	down.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	h.waitStage(t, stageDone)
	waittest.Until(t, "a few failed posts", func() bool { return down.callCount() >= 3 })
	cancel()
	waittest.Recv(t, done, "the agent's Run to return after its context was cancelled")

	var graceOver string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "grace period over") {
			graceOver = l
		}
	}
	if graceOver == "" || strings.Contains(graceOver, "killing") || !strings.Contains(graceOver, "results_unposted=1") {
		t.Fatalf("the log's grace-period line: %q\nwant one that kills nothing (the script had ended) and counts results_unposted=1; the log:\n%s", graceOver, logs.String())
	}
}

// TestAGracePeriodThatEndsWithUnpostedResultsAndNoSpoolSaysTheStopWaits:
// without a state_dir to keep them, results still unposted when the grace
// period ends are posted on, until their deadlines, and the stop waits for
// them: the log says so, not that their posting ends there (a review: it
// said so, and the proxy ran on 47 s).
func TestAGracePeriodThatEndsWithUnpostedResultsAndNoSpoolSaysTheStopWaits(t *testing.T) {
	t.Parallel()
	quickScript(t)
	down := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return status.Error(codes.Unavailable, "down") })
	var logs logtest.Buffer
	a := New(Options{
		tune:   testTuning(t),
		Client: down, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 20 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	c := claim(t, "w1", &automatorv1.Command{Script: "s"})
	c.Remaining = durationpb.New(2 * time.Second) // the stop waits for it
	down.claims <- c
	waittest.Until(t, "a few failed posts", func() bool { return down.callCount() >= 3 })
	cancel()
	waittest.Recv(t, done, "the agent's Run to return once the unit's deadline passed")
	if want := "without a state_dir to keep them, the stop waits while they are posted, until their units' deadlines at the latest"; !strings.Contains(logs.String(), want) || strings.Contains(logs.String(), "posting them ends here") {
		t.Fatalf("the log of a stop with a result unposted and no spool lacks %q:\n%s", want, logs.String())
	}
}
