package server_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// The attacker of these tests holds one account's valid token (a
// compromised or buggy proxy host of that account): it picks its instance
// id, run id and poll numbers as it likes.

// stateOf reads a unit's state through the caller API.
func (e *env) stateOf(id string) automatorv1.State {
	e.t.Helper()
	st, err := e.callerClient().Get(context.Background(), &automatorv1.GetRequest{WorkId: id})
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return st.GetState()
}

// TestAProxyOfTheAccountCannotEndAnotherInstancesClaim: an instance holding
// the account's token cannot end a unit another instance claimed: not with
// a result or failure under a claim id of its own making (the claim id is
// random and sent only in the claimer's answer), nor by saying, in a poll of
// its own, that answers were lost (lost_from) for the claimer's instance id
// under another run id, or for the claimer's run id under another instance
// id. The unit stays claimed and its claimer's result is recorded. The
// limit: a poll naming both the claimer's instance id and its run id (128
// random bits a proxy process never sends anywhere but in its own polls)
// does end the claimer's units, as that process's own poll would.
func TestAProxyOfTheAccountCannotEndAnotherInstancesClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour})
	ctx := t.Context()
	api := e.callerClient()
	victim, attacker := e.proxyClient(), e.proxyClient()
	claimAs := func(instance, run string) *automatorv1.Claim {
		t.Helper()
		u := submit(t, api, e.account, time.Hour)
		resp, err := pollNumbered(ctx, victim, instance, run, 1, 0, 1, 0)
		if err != nil || len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != u.GetWorkId() {
			t.Fatalf("victim's poll: %v, %v; want unit %s", resp, err, u.GetWorkId())
		}
		return resp.GetClaims()[0]
	}
	c := claimAs("victim", "run-victim")

	for _, outcome := range []automatorv1.Outcome{automatorv1.Outcome_OUTCOME_FAILED, automatorv1.Outcome_OUTCOME_SUCCEEDED} {
		req := &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: "c_00000000000000000000000000000000", InstanceId: "victim", Outcome: outcome, Failure: "forged"}
		if outcome == automatorv1.Outcome_OUTCOME_SUCCEEDED {
			req.SealedResult = e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("forged")})
		}
		_, err := attacker.Complete(ctx, req)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "another claim id") {
			t.Errorf("%v posted under a forged claim id: %v; want FailedPrecondition (another claim id)", outcome, err)
		}
		resp, err := attacker.CompleteBatch(ctx, &automatorv1.CompleteBatchRequest{Results: []*automatorv1.CompleteRequest{req}})
		if err != nil || codes.Code(resp.GetOutcomes()[0].GetCode()) != codes.FailedPrecondition {
			t.Errorf("%v posted in a batch under a forged claim id: %v, %v; want FailedPrecondition", outcome, resp, err)
		}
		if _, err := attacker.Complete(ctx, &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), InstanceId: "victim", Outcome: outcome}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v posted without a claim id: %v; want InvalidArgument", outcome, err)
		}
	}
	// Polls of the attacker's saying their answers were lost: another run
	// of the victim's instance id, and the victim's run under another
	// instance id.
	for _, as := range []struct{ instance, run string }{{"victim", "run-attacker"}, {"attacker", "run-victim"}} {
		if _, err := pollNumbered(ctx, attacker, as.instance, as.run, math.MaxInt64, 1, 0, 0); err != nil {
			t.Fatalf("attacker's poll as %s/%s saying polls 1 on were lost: %v", as.instance, as.run, err)
		}
	}
	if st := e.stateOf(c.GetWorkId()); st != automatorv1.State_STATE_CLAIMED {
		t.Fatalf("the victim's unit after the attacks: %v; want still claimed", st)
	}
	e.completeClaim(victim, "victim", c)
	if st := e.stateOf(c.GetWorkId()); st != automatorv1.State_STATE_SUCCEEDED {
		t.Errorf("the victim's unit after its result: %v; want succeeded", st)
	}

	// The limit, as docs/security.md states it: the instance id and the
	// run id together reach the run's claims.
	c = claimAs("victim", "run-victim-2")
	if _, err := pollNumbered(ctx, attacker, "victim", "run-victim-2", 2, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if st := e.stateOf(c.GetWorkId()); st != automatorv1.State_STATE_FAILED {
		t.Errorf("unit of a run whose instance id and run id a poll named as lost: %v; want failed", st)
	}
}

// TestAProxyCannotTouchAnotherAccountsUnits: a token of one account cannot
// end, nor learn anything of, a unit of another account, even holding its
// work id and claim id: every attempt gets NOT_FOUND in the words an
// unknown work id gets, and the unit's own claimer completes it.
func TestAProxyCannotTouchAnotherAccountsUnits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour})
	ctx := t.Context()
	globexToken, globexKey := e.addAccount("globex")
	globex := automatorv1.NewProxyServiceClient(e.conn(globexToken))
	attacker := e.proxyClient() // acme's token
	u := submitScript(t, e.callerClient(), "globex", "x.sh", time.Hour)
	resp, err := pollNumbered(ctx, globex, "g-1", "run-g", 1, 0, 1, 0)
	if err != nil || len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != u.GetWorkId() {
		t.Fatalf("globex's poll: %v, %v", resp, err)
	}
	c := resp.GetClaims()[0]
	unknown := "w_" + strings.Repeat("0", 32)

	sealedBy := func(k crypto.Key, account, id string) []byte {
		plain, _ := proto.Marshal(&automatorv1.Result{Stdout: []byte("forged")})
		b, err := crypto.Seal(k, account, id, crypto.DirResult, plain)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	attempts := map[string]func(id string) *automatorv1.CompleteRequest{
		"a failure": func(id string) *automatorv1.CompleteRequest {
			return &automatorv1.CompleteRequest{WorkId: id, ClaimId: c.GetClaimId(), InstanceId: "g-1", Outcome: automatorv1.Outcome_OUTCOME_FAILED}
		},
		"a result sealed with its own key": func(id string) *automatorv1.CompleteRequest {
			return &automatorv1.CompleteRequest{WorkId: id, ClaimId: c.GetClaimId(), InstanceId: "g-1", Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED,
				SealedResult: sealedBy(e.key, e.account, id)}
		},
		"a result sealed with the other account's key": func(id string) *automatorv1.CompleteRequest {
			return &automatorv1.CompleteRequest{WorkId: id, ClaimId: c.GetClaimId(), InstanceId: "g-1", Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED,
				SealedResult: sealedBy(globexKey, "globex", id)}
		},
	}
	for name, req := range attempts {
		_, err := attacker.Complete(ctx, req(c.GetWorkId()))
		_, errUnknown := attacker.Complete(ctx, req(unknown))
		if status.Code(err) != codes.NotFound || status.Code(errUnknown) != codes.NotFound {
			t.Errorf("%s for another account's unit: %v (an unknown id: %v); want NotFound for both", name, err, errUnknown)
			continue
		}
		if a, b := strings.ReplaceAll(status.Convert(err).Message(), c.GetWorkId(), "ID"), strings.ReplaceAll(status.Convert(errUnknown).Message(), unknown, "ID"); a != b {
			t.Errorf("%s: another account's unit gets %q, an unknown id %q; want the same words", name, a, b)
		}
	}
	// Saying the lost answers were its own, under globex's instance and run.
	if _, err := pollNumbered(ctx, attacker, "g-1", "run-g", 2, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if st := e.stateOf(c.GetWorkId()); st != automatorv1.State_STATE_CLAIMED {
		t.Fatalf("globex's unit after acme's attempts: %v; want still claimed", st)
	}
	if _, err := globex.Complete(ctx, &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "g-1",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: sealedBy(globexKey, "globex", c.GetWorkId())}); err != nil {
		t.Fatalf("globex's own result: %v", err)
	}
}

// TestResultsReplayedTwiceOrLateAreRefused: a second result for a unit,
// the same result again, or a result after the unit was cancelled are
// refused with FAILED_PRECONDITION, and the recorded outcome is unchanged.
// Malformed results (no outcome, an empty or truncated sealed result, a
// failure over its limit) are refused with INVALID_ARGUMENT and the unit
// stays claimed for its genuine result.
func TestResultsReplayedTwiceOrLateAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()

	u := submit(t, api, e.account, time.Hour)
	c := claimOne(t, px, "a")
	good := e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("genuine")})
	base := func() *automatorv1.CompleteRequest {
		return &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a", Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: good}
	}
	malformed := map[string]func(*automatorv1.CompleteRequest){
		"no outcome":         func(r *automatorv1.CompleteRequest) { r.Outcome = automatorv1.Outcome_OUTCOME_UNSPECIFIED },
		"an unknown outcome": func(r *automatorv1.CompleteRequest) { r.Outcome = 99 },
		"no sealed result":   func(r *automatorv1.CompleteRequest) { r.SealedResult = nil },
		"a truncated result": func(r *automatorv1.CompleteRequest) { r.SealedResult = good[:10] },
		"a one-byte result":  func(r *automatorv1.CompleteRequest) { r.SealedResult = []byte{1} },
		"an overlong failure": func(r *automatorv1.CompleteRequest) {
			r.Outcome, r.SealedResult, r.Failure = 2, nil, strings.Repeat("x", 1025)
		},
		"a work id with a break": func(r *automatorv1.CompleteRequest) { r.WorkId += "\n" },
		"an overlong claim id":   func(r *automatorv1.CompleteRequest) { r.ClaimId = strings.Repeat("c", 129) },
	}
	for name, mod := range malformed {
		r := base()
		mod(r)
		if _, err := px.Complete(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v; want InvalidArgument", name, err)
		}
	}
	if st := e.stateOf(u.GetWorkId()); st != automatorv1.State_STATE_CLAIMED {
		t.Fatalf("unit after malformed results: %v; want still claimed", st)
	}
	if _, err := px.Complete(ctx, base()); err != nil {
		t.Fatalf("the genuine result: %v", err)
	}
	second := base()
	second.SealedResult = e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("second")})
	failure := base()
	failure.Outcome, failure.SealedResult = automatorv1.Outcome_OUTCOME_FAILED, nil
	// The proxy tells the very same result again, whose first answer was
	// lost, by the words the refusal ends with: only it carries them.
	for name, r := range map[string]*automatorv1.CompleteRequest{"the same result again": base(), "a second result": second, "a failure after it": failure} {
		_, err := px.Complete(ctx, r)
		recorded := strings.HasSuffix(status.Convert(err).Message(), grpcwire.ResultRecordedAlready)
		if status.Code(err) != codes.FailedPrecondition || recorded != (name == "the same result again") {
			t.Errorf("%s: %v; want FailedPrecondition, ending %q only for the same result again", name, err, grpcwire.ResultRecordedAlready)
		}
	}
	st, err := api.Get(ctx, &automatorv1.GetRequest{WorkId: u.GetWorkId()})
	if err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != "genuine" {
		t.Fatalf("unit after the replays: %v, %v; want succeeded with the genuine result", st, err)
	}

	// After a cancel, the claimer's result is refused.
	u = submit(t, api, e.account, time.Hour)
	c = claimOne(t, px, "a")
	if _, err := api.Cancel(ctx, &automatorv1.CancelRequest{WorkId: u.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	_, err = px.Complete(ctx, &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{})})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("a result after a cancel: %v; want FailedPrecondition naming the state", err)
	}
}

// TestAbsurdPollAndExecuteValuesAreRefusedOrBounded: a poll asking for
// more units than a poll carries, or fewer than none, is refused; a poll
// asking to wait for ages, or a negative time, waits no longer than the
// automator's window (its answer says the window it used); an execute's
// timeout that is zero, negative, past the maximum or not a valid duration
// is refused.
func TestAbsurdPollAndExecuteValuesAreRefusedOrBounded(t *testing.T) {
	t.Parallel()
	const window = 50 * time.Millisecond
	e := newEnv(t, envOptions{pollWindow: window})
	ctx := t.Context()
	px, api := e.proxyClient(), e.callerClient()
	for _, max := range []int32{-1, math.MinInt32, 257, math.MaxInt32} {
		_, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: max, Wait: durationpb.New(0)})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("max_units %d: %v; want InvalidArgument", max, err)
		}
	}
	for _, wait := range []*durationpb.Duration{{Seconds: math.MaxInt64}, {Seconds: -1}, {Seconds: math.MinInt64}, {Seconds: 1, Nanos: -5}} {
		resp, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1, Wait: wait})
		if err != nil {
			t.Errorf("wait %v: %v", wait, err)
			continue
		}
		// (The window may be lengthened to end on the automator's tick.)
		if used := resp.GetWait().AsDuration(); used > window+time.Second {
			t.Errorf("wait %v: the poll used a window of %v; want at most the automator's %v", wait, used, window)
		}
	}
	for _, timeout := range []*durationpb.Duration{{Seconds: 0}, {Seconds: -1}, {Seconds: math.MaxInt64}, {Seconds: math.MinInt64}, {Seconds: 1, Nanos: -1}, {Nanos: 2e9}, {Seconds: 24*3600 + 1}} {
		_, err := api.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}, Timeout: timeout})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "timeout") {
			t.Errorf("timeout %v: %v; want InvalidArgument naming the timeout", timeout, err)
		}
	}
}

// TestCompleteInstanceIDIsCheckedLikeAPolls: a result's instance_id, which
// the automator writes into its log when it refuses the result, is held to
// a poll's rules (128 bytes, no control character): a token's holder
// cannot write a megabyte, or a forged line, into the log per call. Every
// proxy sends the instance id it polls with; one sending none is served.
func TestCompleteInstanceIDIsCheckedLikeAPolls(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	e := newEnv(t, envOptions{pollWindow: time.Hour, log: log})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()
	submit(t, api, e.account, time.Hour)
	c := claimOne(t, px, "a")
	bad := e.sealResult(c.GetWorkId(), &automatorv1.Result{})
	bad[len(bad)-1] ^= 1 // refused, and logged, once the instance id is taken
	for name, id := range map[string]string{
		"a megabyte":       strings.Repeat("i", 1<<20),
		"129 bytes":        strings.Repeat("i", 129),
		"a forged line":    "a\nlevel=ERROR msg=\"forged\"",
		"an escape":        "a\x1b[2J",
		"a C1 control":     "a\u009b2J",
		"a CompleteBatch…": strings.Repeat("b", 200),
	} {
		req := &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: id,
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: bad}
		_, err := px.Complete(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "instance_id") {
			t.Errorf("instance_id of %s: %v; want InvalidArgument naming instance_id", name, err)
		}
		resp, err := px.CompleteBatch(ctx, &automatorv1.CompleteBatchRequest{Results: []*automatorv1.CompleteRequest{req}})
		if err != nil || codes.Code(resp.GetOutcomes()[0].GetCode()) != codes.InvalidArgument {
			t.Errorf("instance_id of %s in a batch: %v, %v; want InvalidArgument", name, resp, err)
		}
	}
	log.mu.Lock()
	written := log.b.String()
	log.mu.Unlock()
	if len(written) > 64<<10 {
		t.Errorf("refusing 12 results wrote %d bytes of log", len(written))
	}
	if strings.Contains(written, "\nlevel=ERROR msg=\"forged\"") {
		t.Errorf("the log holds a forged line: %q", written)
	}
	// No instance id at all: served (the refusal here is the blob's).
	_, err := px.Complete(ctx, &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(),
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: bad})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "did not open") {
		t.Errorf("a result without an instance id: %v; want it looked at (and refused as it does not open)", err)
	}
	e.completeClaim(px, "", c)
}

// TestAnotherProcessesLookDoesNotHideACancelFromAProxyWithoutRunID: a
// poll's look at the states of the units it runs stands in, for a second,
// for the next look of the same proxy process (instance and run id). A
// proxy predating run ids sends none, so any process of the account
// polling under its instance id without a run id (a token's holder, or a
// second old proxy sharing the name) is, to the automator, the same
// process: its look, at other units, must not make the old proxy's next
// poll skip its own, or that poll is not told that its unit was cancelled
// and its script runs on.
func TestAnotherProcessesLookDoesNotHideACancelFromAProxyWithoutRunID(t *testing.T) {
	t.Parallel()
	clock := newFakeClock() // still: every look is fresh
	e := newEnv(t, envOptions{pollWindow: time.Hour, clock: clock})
	ctx := t.Context()
	api, old, other := e.callerClient(), e.proxyClient(), e.proxyClient()
	u := submit(t, api, e.account, time.Hour)
	c := claimOne(t, old, "host-a")
	if _, err := api.Cancel(ctx, &automatorv1.CancelRequest{WorkId: u.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	// The other process looks at units of its own, after the cancel.
	resp, err := other.Poll(ctx, &automatorv1.PollRequest{InstanceId: "host-a", MaxUnits: 0, Wait: durationpb.New(0), Running: []string{"w_" + strings.Repeat("1", 32)}})
	if err != nil || len(resp.GetCancelled()) != 0 {
		t.Fatalf("the other process's poll: %v, %v; want an empty answer", resp, err)
	}
	resp, err = old.Poll(ctx, &automatorv1.PollRequest{InstanceId: "host-a", MaxUnits: 0, Wait: durationpb.New(0), Running: []string{c.GetWorkId()}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetCancelled()) != 1 || resp.GetCancelled()[0] != c.GetWorkId() {
		t.Errorf("the old proxy's poll listing its cancelled unit: told %v; want [%s]", resp.GetCancelled(), c.GetWorkId())
	}
}
