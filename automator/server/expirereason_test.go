package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// executeUnclaimed runs ExecuteOnProxy for a unit no instance claims (a
// 300 ms timeout), and returns the reason the caller is given, after
// checking that Get (`automator work get`, the dashboard) gives the same.
func executeUnclaimed(t *testing.T, e *env) string {
	t.Helper()
	st, err := e.callerClient().ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy of a unit nobody claims to answer at its 300ms deadline"), &automatorv1.ExecuteRequest{
		Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}, Timeout: durationpb.New(300 * time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Fatalf("state %v, want timed out", st.GetState())
	}
	got, err := e.callerClient().Get(context.Background(), &automatorv1.GetRequest{WorkId: st.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetReason() != st.GetReason() {
		t.Errorf("Get says reason %q, ExecuteOnProxy said %q", got.GetReason(), st.GetReason())
	}
	return st.GetReason()
}

// pollAs makes one poll of instance id for no units, returning at once.
func pollAs(t *testing.T, e *env, id string, stopping bool) {
	t.Helper()
	_, err := e.proxyClient().Poll(context.Background(), &automatorv1.PollRequest{
		InstanceId: id, Wait: durationpb.New(0), RunId: "run-" + id, PollSeq: 1, Stopping: stopping})
	if err != nil {
		t.Fatalf("Poll of %s (stopping %v): %v", id, stopping, err)
	}
}

// lastPoll is instance id's last poll as the store holds it.
func lastPoll(t *testing.T, e *env, id string) time.Time {
	t.Helper()
	list, err := e.store.InstanceList(context.Background(), e.account)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.InstanceID == id {
			return in.LastPollAt
		}
	}
	t.Fatalf("instance %s is not recorded: %+v", id, list)
	return time.Time{}
}

// TestAnUnclaimedUnitsTimeoutSaysTheAccountHasNoInstance: with no
// instance of the account ever polling, the caller is told so, and what to
// do, rather than only that nobody claimed the unit.
func TestAnUnclaimedUnitsTimeoutSaysTheAccountHasNoInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	want := "no instance claimed it before the deadline: account acme has no proxy instance (none has polled in 30 days, if ever); start one with the account's profile"
	if got := executeUnclaimed(t, e); got != want {
		t.Errorf("reason %q\nwant %q", got, want)
	}
}

// TestAnUnclaimedUnitsTimeoutNamesTheInstancesWhenNoneWasOnline: with
// instances recorded and none online, the caller is told which, and
// whether each stopped (a graceful stop, however recent) or when it last
// polled (one that died; here recorded by another replica an hour ago).
func TestAnUnclaimedUnitsTimeoutNamesTheInstancesWhenNoneWasOnline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	pollAs(t, e, "p1", true)
	gone := time.Now().Add(-time.Hour)
	if err := e.store.InstanceSeen(context.Background(), store.InstanceSeenParams{Account: e.account, InstanceID: "p2", Hostname: "p2", Version: "v1", Now: gone}); err != nil {
		t.Fatal(err)
	}
	want := "no instance claimed it before the deadline: no instance of account acme was online (p1 stopped at " +
		lastPoll(t, e, "p1").UTC().Format(time.RFC3339) + "; p2 last polled at " + gone.UTC().Format(time.RFC3339) + ")"
	if got := executeUnclaimed(t, e); got != want {
		t.Errorf("reason %q\nwant %q", got, want)
	}
}

// TestAnUnclaimedUnitsTimeoutCountsTheInstancesOnline: instances online
// that claim nothing (busy at their max_concurrency: polls for no units)
// keep the reason as it was, with how many were online; one polled on
// this automator, one recorded by another replica. One that last polled an
// hour ago is not counted.
func TestAnUnclaimedUnitsTimeoutCountsTheInstancesOnline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	pollAs(t, e, "p1", false)
	for id, polled := range map[string]time.Time{"p2": time.Now(), "p3": time.Now().Add(-time.Hour)} {
		if err := e.store.InstanceSeen(context.Background(), store.InstanceSeenParams{Account: e.account, InstanceID: id, Hostname: id, Version: "v1", Now: polled}); err != nil {
			t.Fatal(err)
		}
	}
	want := "no instance claimed it before the deadline (2 instances online)"
	if got := executeUnclaimed(t, e); got != want {
		t.Errorf("reason %q\nwant %q", got, want)
	}
}
