package agent

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestAnIdleStopWithoutGraceSaysNothingOfAGracePeriod: a proxy with
// grace_period 0s stopped while nothing runs and no result waits has
// nothing to kill or to give up; its stop does not warn that the grace
// period is over and that unposted results (none) are given up.
func TestAnIdleStopWithoutGraceSaysNothingOfAGracePeriod(t *testing.T) {
	t.Parallel()
	shortReportLost(t) // the fake leaves the poll cancelled by the stop unanswered
	f := newFake()
	var log lockedWriter
	log.b = &bytes.Buffer{}
	a := New(Options{
		tune:   testTuning(t),
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 0,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	waittest.Until(t, "the first poll", func() bool { return f.lastPoll() != nil })
	cancel()
	waittest.Recv(t, done, "the stop to end")
	if strings.Contains(log.String(), "grace period over") {
		t.Fatalf("an idle stop with no grace period warned of its end:\n%s", log.String())
	}
}
