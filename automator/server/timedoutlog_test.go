package server_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/internal/loglimit"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestTimeoutsAreLoggedWithinABound: units timing out (no proxy polls,
// callers keep queueing) write at most loglimit.DefaultLines lines a
// minute, not one each; every one still ends timed_out. The clock is
// injected: the units all time out within one minute of it, however long
// queueing them takes.
func TestTimeoutsAreLoggedWithinABound(t *testing.T) {
	t.Parallel()
	var log syncLog
	clock := newFakeClock()
	e := newEnv(t, envOptions{log: &log, clock: clock, sweepInterval: 50 * time.Millisecond})
	c := e.callerClient()
	const units = loglimit.DefaultLines + 10
	var ids []string
	for range units {
		w, err := c.Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
			Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(100 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, w.GetWorkId())
	}
	clock.Advance(time.Second) // past every deadline
	for _, id := range ids {
		w, err := c.Wait(t.Context(), &automatorv1.WaitRequest{WorkId: id})
		if err != nil {
			t.Fatal(err)
		}
		if w.GetState() != automatorv1.State_STATE_TIMED_OUT {
			t.Fatalf("%s ended %v, want timed out", id, w.GetState())
		}
	}
	if n := len(log.lines("work timed out")); n != loglimit.DefaultLines {
		t.Fatalf("%d lines for %d units timed out within a minute, want %d:\n%s", n, units, loglimit.DefaultLines, log.lines())
	}
	// No instance claimed them: their lines name none (an empty
	// instance_id read as an instance with no name), their reason says
	// why.
	if got := log.lines("work timed out", "instance_id"); len(got) != 0 {
		t.Errorf("lines of units no instance claimed name an instance: %q", got)
	}
}
