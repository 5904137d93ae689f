package server_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestListInstancesCountsTheUnitsEachInstanceHoldsClaimed: ListInstances'
// in_flight is the units an instance holds claimed, not what its last poll
// said it ran. A poller that claims two units, says so at its next poll and
// dies shows them in flight until they time out, then 0; one that said at
// its last poll that it ran a unit, then posted its result, shows 0.
func TestListInstancesCountsTheUnitsEachInstanceHoldsClaimed(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	ended := make(endings, 3)
	e := newEnv(t, envOptions{clock: clock, sweepInterval: 20 * time.Millisecond, metrics: ended})
	caller, proxy := e.callerClient(), e.proxyClient()
	ctx := t.Context()
	poll := func(instance string, max int32, running ...string) []*automatorv1.Claim {
		t.Helper()
		resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: instance, MaxUnits: max, Wait: durationpb.New(0), Running: running})
		if err != nil {
			t.Fatalf("poll of %s: %v", instance, err)
		}
		return resp.GetClaims()
	}
	// Polls closer together than the automator writes them (seenEvery)
	// would not be stored: the clock moves past that between them.
	const apart = 10 * time.Second
	wantInFlight := func(when string, want map[string]int32) {
		t.Helper()
		list, err := caller.ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: e.account})
		if err != nil {
			t.Fatalf("ListInstances %s: %v", when, err)
		}
		got := map[string]int32{}
		for _, in := range list.GetInstances() {
			got[in.GetInstanceId()] = in.GetInFlight()
		}
		if len(got) != len(want) || got["dead"] != want["dead"] || got["idle"] != want["idle"] {
			t.Errorf("in flight %s = %v, want %v", when, got, want)
		}
	}

	// idle runs a unit, says so at its next poll, then posts its result.
	submit(t, caller, e.account, 10*time.Minute)
	claims := poll("idle", 1)
	if len(claims) != 1 {
		t.Fatalf("idle claimed %d units, want 1", len(claims))
	}
	clock.Advance(apart)
	poll("idle", 0, claims[0].GetWorkId())
	if _, err := proxy.Complete(ctx, &automatorv1.CompleteRequest{WorkId: claims[0].GetWorkId(), ClaimId: claims[0].GetClaimId(), InstanceId: "idle",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(claims[0].GetWorkId(), &automatorv1.Result{})}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if w := waittest.Recv(t, ended, "idle's unit to end with its result"); w.State != store.StateSucceeded {
		t.Fatalf("idle's unit ended %s, want succeeded", w.State)
	}

	// dead claims two units, says so at its next poll, and polls no more.
	submit(t, caller, e.account, 10*time.Minute)
	submit(t, caller, e.account, 10*time.Minute)
	claims = poll("dead", 2)
	if len(claims) != 2 {
		t.Fatalf("dead claimed %d units, want 2", len(claims))
	}
	clock.Advance(apart)
	poll("dead", 0, claims[0].GetWorkId(), claims[1].GetWorkId())
	wantInFlight("while dead's units are claimed", map[string]int32{"dead": 2, "idle": 0})

	// At their deadline the sweeper times them out.
	clock.Advance(10 * time.Minute)
	for range 2 {
		if w := waittest.Recv(t, ended, "dead's units to time out at their deadline"); w.State != store.StateTimedOut || w.InstanceID != "dead" {
			t.Fatalf("unit %s of %s ended %s, want dead's timed out", w.ID, w.InstanceID, w.State)
		}
	}
	wantInFlight("once dead's units timed out", map[string]int32{"dead": 0, "idle": 0})
}
