package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestARefusedResultNeverReachesTheWaitingCaller: a caller waits in
// ExecuteOnProxy (subscribed to the unit's end before the unit exists)
// while results the automator refuses are posted for its unit, one that
// opens under another claim id and a failure under it: the caller is told
// nothing of them, and gets the genuine result, posted after them, once
// it is recorded.
func TestARefusedResultNeverReachesTheWaitingCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	proxy := e.proxyClient()
	type answer struct {
		st  *automatorv1.WorkStatus
		err error
	}
	done := make(chan answer, 1)
	go func() {
		st, err := e.callerClient().ExecuteOnProxy(context.Background(), &automatorv1.ExecuteRequest{
			Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}, Timeout: durationpb.New(time.Minute),
		})
		done <- answer{st, err}
	}()
	c := claimOne(t, proxy, "a")
	other := []byte(c.GetClaimId())
	other[len(other)-1] ^= 1 // still a valid id, not the unit's
	for name, req := range map[string]*automatorv1.CompleteRequest{
		"a result under another claim id": {
			WorkId: c.GetWorkId(), ClaimId: string(other), InstanceId: "b",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("forged")}),
		},
		"a failure under another claim id": {
			WorkId: c.GetWorkId(), ClaimId: string(other), InstanceId: "b",
			Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "forged",
		},
	} {
		if _, err := proxy.Complete(context.Background(), req); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%s: %v, want FailedPrecondition", name, err)
		}
	}
	if _, err := proxy.Complete(context.Background(), &automatorv1.CompleteRequest{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("genuine")}),
	}); err != nil {
		t.Fatalf("the genuine result: %v", err)
	}
	a := waittest.Recv(t, done, "ExecuteOnProxy to answer once the genuine result was recorded")
	if a.err != nil {
		t.Fatalf("ExecuteOnProxy: %v", a.err)
	}
	if a.st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(a.st.GetResult().GetStdout()) != "genuine" {
		t.Fatalf("the waiting caller got %v with stdout %q (reason %q); want the genuine result, SUCCEEDED with stdout \"genuine\"",
			a.st.GetState(), a.st.GetResult().GetStdout(), a.st.GetReason())
	}
}
