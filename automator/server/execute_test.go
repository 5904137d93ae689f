package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

func submit(t *testing.T, c automatorv1.AutomatorServiceClient, account string, timeout time.Duration) *automatorv1.WorkStatus {
	t.Helper()
	req := &automatorv1.ExecuteRequest{Account: account, Command: &automatorv1.Command{Script: "x.sh"}}
	if timeout > 0 {
		req.Timeout = durationpb.New(timeout)
	}
	st, err := c.Submit(context.Background(), req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return st
}

func TestDefaultTimeoutIsFiveMinutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	st := submit(t, e.callerClient(), e.account, 0)
	if got := st.GetDeadline().AsTime().Sub(st.GetQueuedAt().AsTime()); got != 5*time.Minute {
		t.Fatalf("deadline - queued_at = %v, want 5m", got)
	}
}

// TestUnclaimedUnitTimesOutAtItsDeadline: with no instance polling,
// ExecuteOnProxy returns timed_out, not before the deadline.
func TestUnclaimedUnitTimesOutAtItsDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	start := time.Now()
	st, err := e.callerClient().ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy of a unit nobody claims to answer at its 300ms deadline"), &automatorv1.ExecuteRequest{
		Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}, Timeout: durationpb.New(300 * time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Fatalf("state %v, want timed out", st.GetState())
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("timed out after %v, before the 300ms deadline", el)
	}
	if !strings.Contains(st.GetReason(), "no instance claimed it") {
		t.Fatalf("reason %q does not say nobody claimed it", st.GetReason())
	}
}

// TestResultAfterTerminalIsRefused: a result for a cancelled unit gets
// FAILED_PRECONDITION and does not change the unit.
func TestResultAfterTerminalIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	caller, proxy := e.callerClient(), e.proxyClient()
	w := submit(t, caller, e.account, time.Minute)
	resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v, %d claims", err, len(resp.GetClaims()))
	}
	c := resp.GetClaims()[0]
	if _, err := caller.Cancel(ctx, &automatorv1.CancelRequest{WorkId: w.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	_, err = proxy.Complete(ctx, &automatorv1.CompleteRequest{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{}),
	})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("complete after cancel: %v, want FailedPrecondition", err)
	}
	st, _ := caller.Get(ctx, &automatorv1.GetRequest{WorkId: w.GetWorkId()})
	if st.GetState() != automatorv1.State_STATE_CANCELLED {
		t.Fatalf("state %v, want cancelled", st.GetState())
	}
}

// TestCancelWakesTheClaimersPoll: a poll that lists a running unit returns
// at once when that unit is cancelled, naming it.
func TestCancelWakesTheClaimersPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Minute})
	ctx := context.Background()
	caller, proxy := e.callerClient(), e.proxyClient()
	w := submit(t, caller, e.account, time.Minute)
	resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v", err)
	}
	got := make(chan *automatorv1.PollResponse, 1)
	go func() {
		r, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 0, Running: []string{w.GetWorkId()}})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	if _, err := caller.Cancel(ctx, &automatorv1.CancelRequest{WorkId: w.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if len(r.GetCancelled()) != 1 || r.GetCancelled()[0] != w.GetWorkId() {
			t.Fatalf("poll returned cancelled=%v, want [%s]", r.GetCancelled(), w.GetWorkId())
		}
	case <-time.After(30 * time.Second): // far below the 1-minute window
		t.Fatal("the claimer's poll was not woken by the cancel")
	}
}

// TestTamperedResultIsRefusedAndUnitStaysClaimed: a result that does not
// open is refused with a clear message and the claim stays intact, so the
// genuine result can still be posted.
func TestTamperedResultIsRefusedAndUnitStaysClaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	caller, proxy := e.callerClient(), e.proxyClient()
	w := submit(t, caller, e.account, time.Minute)
	resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v", err)
	}
	c := resp.GetClaims()[0]
	good := e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("ok")})
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 1
	// A result sealed for another unit is a replay: refused too.
	replay := e.sealResult("w_other", &automatorv1.Result{Stdout: []byte("ok")})
	for name, blob := range map[string][]byte{"tampered": bad, "replayed": replay} {
		_, err = proxy.Complete(ctx, &automatorv1.CompleteRequest{
			WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: blob,
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "did not open") {
			t.Fatalf("%s result: %v, want InvalidArgument saying it did not open", name, err)
		}
	}
	if _, err := proxy.Complete(ctx, &automatorv1.CompleteRequest{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: good,
	}); err != nil {
		t.Fatalf("genuine result after a tampered one: %v", err)
	}
	st, _ := caller.Wait(waittest.Context(t, "Wait to answer once the genuine result was posted"), &automatorv1.WaitRequest{WorkId: w.GetWorkId()})
	if string(st.GetResult().GetStdout()) != "ok" {
		t.Fatalf("stdout %q, want ok", st.GetResult().GetStdout())
	}
}

func TestWrongSecretsAreUnauthenticated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	_, err := automatorv1.NewProxyServiceClient(e.conn("opt_wrong")).Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("poll with a wrong token: %v, want Unauthenticated", err)
	}
	_, err = automatorv1.NewAutomatorServiceClient(e.conn("oak_wrong")).Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x"}})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("submit with a wrong API key: %v, want Unauthenticated", err)
	}
	// A token is not an API key, nor the other way round.
	_, err = automatorv1.NewAutomatorServiceClient(e.conn(e.token)).Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x"}})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("submit with an account token: %v, want Unauthenticated", err)
	}
	_, err = automatorv1.NewProxyServiceClient(e.conn(e.apiKey)).Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("poll with an API key: %v, want Unauthenticated", err)
	}
}

// TestOversizedCommandIsRefusedAndOthersServed: each limit gives one
// precise InvalidArgument, and the automator keeps serving.
func TestOversizedCommandIsRefusedAndOthersServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	caller := e.callerClient()
	big := make([]string, 1025)
	cases := map[string]*automatorv1.Command{
		"command.stdin":  {Script: "x", Stdin: make([]byte, 1<<20+1)},
		"command.args":   {Script: "x", Args: big},
		"command.script": {Script: strings.Repeat("x", 256)},
	}
	for field, cmd := range cases {
		_, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: cmd})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "limit") {
			t.Errorf("%s over its limit: %v, want InvalidArgument naming the field and limit", field, err)
		}
	}
	for _, bad := range []*automatorv1.ExecuteRequest{
		{Account: e.account},
		{Account: e.account, Command: &automatorv1.Command{Script: "x"}, Timeout: durationpb.New(-time.Second)},
		{Account: "Not An Account", Command: &automatorv1.Command{Script: "x"}},
	} {
		if _, err := caller.Submit(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("submit %v: %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: "nobody", Command: &automatorv1.Command{Script: "x"}}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown account: %v, want NotFound", err)
	}
	submit(t, caller, e.account, time.Minute) // still serving
}

// TestWaitLeavesNoSubscriptionBehind: every wait unsubscribes, however
// often it was woken.
func TestWaitLeavesNoSubscriptionBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	caller, proxy := e.callerClient(), e.proxyClient()
	for range 3 {
		w := submit(t, caller, e.account, time.Minute)
		done := make(chan error, 1)
		go func() {
			_, err := caller.Wait(ctx, &automatorv1.WaitRequest{WorkId: w.GetWorkId()})
			done <- err
		}()
		resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
		if err != nil || len(resp.GetClaims()) != 1 {
			t.Fatalf("poll: %v", err)
		}
		c := resp.GetClaims()[0]
		if _, err := proxy.Complete(ctx, &automatorv1.CompleteRequest{
			WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{}),
		}); err != nil {
			t.Fatal(err)
		}
		if err := waittest.Recv(t, done, "Wait to return once its unit's result was posted"); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.srv.DoneSubscriptions(); n != 0 {
		t.Fatalf("%d subscriptions left behind after every wait returned", n)
	}
}

// TestPollFieldsPastTheirLimitsAreRefused: a poll whose running ids, host
// name or version are longer than their limits, or that lists a running
// unit twice (each would be told ended, and kept so, again: a review), gets
// one precise InvalidArgument, records nothing, and polls within them are
// served.
func TestPollFieldsPastTheirLimitsAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	proxy := e.proxyClient()
	for field, req := range map[string]*automatorv1.PollRequest{
		"running[1]": {Running: []string{"w_1", strings.Repeat("w", 129)}},
		`running[2] lists unit "w_1" again (running[0])`: {Running: []string{"w_1", "w_2", "w_1"}},
		"hostname": {Hostname: strings.Repeat("h", 256)},
		"version":  {Version: strings.Repeat("v", 129)},
	} {
		req.InstanceId, req.MaxUnits, req.Wait = "big-"+field[:min(len(field), 10)], 1, durationpb.New(0)
		_, err := proxy.Poll(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) {
			t.Errorf("poll with %s over its limit: %v, want InvalidArgument naming it", field, err)
		}
	}
	if _, err := proxy.Poll(context.Background(), &automatorv1.PollRequest{
		InstanceId: "a", MaxUnits: 1, Wait: durationpb.New(0),
		Running: []string{strings.Repeat("w", 128)}, Hostname: strings.Repeat("h", 255), Version: strings.Repeat("v", 128),
	}); err != nil {
		t.Fatalf("poll with every field at its limit: %v", err)
	}
	list, err := e.callerClient().ListInstances(context.Background(), &automatorv1.ListInstancesRequest{Account: e.account})
	if err != nil || len(list.GetInstances()) != 1 || list.GetInstances()[0].GetInstanceId() != "a" {
		t.Fatalf("instances: %v, %v; want only the poll within the limits", list.GetInstances(), err)
	}
}

// endings is a Metrics that hands over each unit as it ends.
type endings chan store.Work

func (endings) WorkQueued(string)                 {}
func (endings) WorkClaimed(string, time.Duration) {}
func (e endings) WorkFinished(w store.Work)       { e <- w }
func (endings) WorkUndelivered(string)            {}
func (endings) PollOpened(string) func()          { return func() {} }

// TestSweeperEndsAUnitNobodyWaitsForAtItsDeadline: a unit whose caller
// submitted it and left is timed out by the sweeper, which a new unit's
// deadline wakes even when its next sweep is an hour away.
func TestSweeperEndsAUnitNobodyWaitsForAtItsDeadline(t *testing.T) {
	t.Parallel()
	ended := make(endings, 1)
	e := newEnv(t, envOptions{sweepInterval: time.Hour, metrics: ended})
	st := submit(t, e.callerClient(), e.account, 200*time.Millisecond)
	w := waittest.Recv(t, ended, "the sweeper to time out the unit nobody waits for at its 200ms deadline")
	if w.ID != st.GetWorkId() || w.State != store.StateTimedOut {
		t.Fatalf("unit %s ended %s, want %s timed out", w.ID, w.State, st.GetWorkId())
	}
	if w, err := e.store.WorkGet(context.Background(), st.GetWorkId()); err != nil || w.State != store.StateTimedOut {
		t.Fatalf("stored unit: %v, %v; want timed out", w.State, err)
	}
}

// TestACancelPastTheDeadlineTimesTheUnitOut: past its deadline a unit is
// due to time out, and its callers are told so at the deadline in every
// case (guarantee 2), even when someone cancels it before the sweep has
// come: the cancel answers with the unit timed out.
func TestACancelPastTheDeadlineTimesTheUnitOut(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, sweepInterval: time.Hour})
	api := e.callerClient()
	u := submit(t, api, e.account, time.Minute)
	clock.Advance(time.Minute + time.Second)
	st, err := api.Cancel(context.Background(), &automatorv1.CancelRequest{WorkId: u.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Fatalf("cancel past the deadline answered %v (%q); want the unit timed out", st.GetState(), st.GetReason())
	}
	if got, err := api.Get(context.Background(), &automatorv1.GetRequest{WorkId: u.GetWorkId()}); err != nil || got.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Fatalf("the unit after the cancel: %v, %v; want it timed out", got.GetState(), err)
	}
}

// TestTimeoutIsKeptOrRefusedAtItsBounds: a timeout in (0, 24h] sets the
// deadline exactly that long after queueing, down to a nanosecond; one
// outside it, or one that is not a valid duration (seconds and nanos of
// different signs, nanos past a second, more than the 10,000 years a
// Duration holds), is refused with INVALID_ARGUMENT naming the timeout,
// and nothing is queued. None is silently read as another duration.
func TestTimeoutIsKeptOrRefusedAtItsBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := e.callerClient()
	ctx := context.Background()
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, 999 * time.Millisecond, 24 * time.Hour} {
		st, err := c.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}, Timeout: durationpb.New(d)})
		if err != nil {
			t.Fatalf("timeout %v: %v", d, err)
		}
		if got := st.GetDeadline().AsTime().Sub(st.GetQueuedAt().AsTime()); got != d {
			t.Errorf("timeout %v: deadline - queued_at = %v", d, got)
		}
	}
	for _, d := range []*durationpb.Duration{
		durationpb.New(24*time.Hour + time.Nanosecond),
		durationpb.New(-time.Nanosecond),
		{}, // set, and zero: not the default, which is asked for by leaving it unset
		{Seconds: 1, Nanos: -5},
		{Seconds: -1, Nanos: 2e9},
		{Nanos: 1e9},
		{Seconds: 1 << 62},
	} {
		_, err := c.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}, Timeout: d})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "timeout") {
			t.Errorf("timeout {%v}: %v, want INVALID_ARGUMENT naming the timeout", d, err)
		}
	}
	units, err := e.store.WorkList(ctx, store.WorkListParams{Account: e.account, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(units) != 4 {
		t.Errorf("%d units stored, want the 4 with valid timeouts", len(units))
	}
}

// TestInstanceIsOnlineWhileItPolledWithinTheWindowsAsListingsSay: an
// instance is online in ListInstances while its last poll is at most
// InstanceOnlineWithin old, to the nanosecond, as in the store's account
// statistics that `automator account list`, `instances` and the dashboard
// show; a nanosecond later it is offline in both.
func TestInstanceIsOnlineWhileItPolledWithinTheWindowsAsListingsSay(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	if _, err := pollNow(e.proxyClient(), "a", 0); err != nil {
		t.Fatal(err)
	}
	within := server.InstanceOnlineWithin(2 * time.Second) // newEnv's poll window
	clock.Advance(within)
	for _, step := range []time.Duration{0, time.Nanosecond} {
		clock.Advance(step)
		list, err := e.callerClient().ListInstances(context.Background(), &automatorv1.ListInstancesRequest{Account: e.account})
		if err != nil || len(list.GetInstances()) != 1 {
			t.Fatalf("instances: %v, %v; want one", list.GetInstances(), err)
		}
		stats, err := e.store.AccountStats(context.Background(), store.AccountStatsParams{OnlineSince: clock.Now().Add(-within)})
		if err != nil || len(stats) != 1 {
			t.Fatalf("account statistics: %v, %v", stats, err)
		}
		online, listed := list.GetInstances()[0].GetOnline(), stats[0].InstancesOnline == 1
		if want := step == 0; online != want || listed != want {
			t.Errorf("last poll %v old (the online bound is %v): ListInstances online %v, listings online %v; want %v in both", within+step, within, online, listed, want)
		}
	}
}
