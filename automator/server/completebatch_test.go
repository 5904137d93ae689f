package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestCompleteBatchAnswersEachResultAlone: a batch mixing good results with
// a tampered one, one under a wrong claim id, one for a unit already ended
// and one for an unknown unit records every good result, refuses each bad
// one with the code and message Complete would give, in the request's order,
// and leaves the refused units as they were.
func TestCompleteBatchAnswersEachResultAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	caller, proxy := e.callerClient(), e.proxyClient()
	var ids []string
	for range 5 {
		ids = append(ids, submit(t, caller, e.account, time.Minute).GetWorkId())
	}
	resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 5})
	if err != nil || len(resp.GetClaims()) != 5 {
		t.Fatalf("poll: %v, %d claims, want 5", err, len(resp.GetClaims()))
	}
	claims := map[string]*automatorv1.Claim{}
	for _, c := range resp.GetClaims() {
		claims[c.GetWorkId()] = c
	}
	result := func(id, claimID string, r *automatorv1.Result) *automatorv1.CompleteRequest {
		return &automatorv1.CompleteRequest{WorkId: id, ClaimId: claimID, InstanceId: "a",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(id, r)}
	}
	good0 := result(ids[0], claims[ids[0]].GetClaimId(), &automatorv1.Result{Stdout: []byte("zero")})
	tampered := result(ids[1], claims[ids[1]].GetClaimId(), &automatorv1.Result{Stdout: []byte("one")})
	tampered.SealedResult[len(tampered.SealedResult)-1] ^= 1
	wrongClaim := result(ids[2], "c_not_this_one", &automatorv1.Result{})
	if _, err := caller.Cancel(ctx, &automatorv1.CancelRequest{WorkId: ids[3]}); err != nil {
		t.Fatal(err)
	}
	ended := result(ids[3], claims[ids[3]].GetClaimId(), &automatorv1.Result{})
	unknown := result("w_unknown", "c_x", &automatorv1.Result{})
	good4 := result(ids[4], claims[ids[4]].GetClaimId(), &automatorv1.Result{Stdout: []byte("four")})

	got, err := proxy.CompleteBatch(ctx, &automatorv1.CompleteBatchRequest{
		Results: []*automatorv1.CompleteRequest{good0, tampered, wrongClaim, ended, unknown, good4},
	})
	if err != nil {
		t.Fatalf("CompleteBatch: %v", err)
	}
	want := []struct {
		code codes.Code
		msg  string
	}{
		{codes.OK, ""},
		{codes.InvalidArgument, "did not open"},
		{codes.FailedPrecondition, "another claim id"},
		{codes.FailedPrecondition, "is cancelled; result refused"},
		{codes.NotFound, "not found"},
		{codes.OK, ""},
	}
	if len(got.GetOutcomes()) != len(want) {
		t.Fatalf("%d outcomes, want %d", len(got.GetOutcomes()), len(want))
	}
	for i, w := range want {
		o := got.GetOutcomes()[i]
		if codes.Code(o.GetCode()) != w.code || !strings.Contains(o.GetMessage(), w.msg) {
			t.Errorf("outcome %d: %v %q, want %v with %q", i, codes.Code(o.GetCode()), o.GetMessage(), w.code, w.msg)
		}
	}

	for i, want := range map[int]string{0: "zero", 4: "four"} {
		st, err := caller.Get(ctx, &automatorv1.GetRequest{WorkId: ids[i]})
		if err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != want {
			t.Errorf("unit %d: %v, %v with stdout %q, want succeeded with %q", i, err, st.GetState(), st.GetResult().GetStdout(), want)
		}
	}
	for i, want := range map[int]automatorv1.State{1: automatorv1.State_STATE_CLAIMED, 2: automatorv1.State_STATE_CLAIMED, 3: automatorv1.State_STATE_CANCELLED} {
		st, err := caller.Get(ctx, &automatorv1.GetRequest{WorkId: ids[i]})
		if err != nil || st.GetState() != want {
			t.Errorf("unit %d: %v, %v, want %v", i, err, st.GetState(), want)
		}
	}
	// The refused tampered result left the claim intact: the genuine one
	// still lands.
	if _, err := proxy.Complete(ctx, result(ids[1], claims[ids[1]].GetClaimId(), &automatorv1.Result{Stdout: []byte("one")})); err != nil {
		t.Fatalf("genuine result after the batch: %v", err)
	}

	// Each recorded result has its own audit record, naming the call.
	events, err := e.store.AuditList(ctx, store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	details := map[string]string{}
	for _, ev := range events {
		if ev.Kind == store.AuditWorkEnded {
			details[ev.WorkID] = ev.Detail
		}
	}
	for i, want := range map[int]string{0: "CompleteBatch", 4: "CompleteBatch", 1: "Complete"} {
		if details[ids[i]] != want {
			t.Errorf("unit %d: audit detail %q, want %q", i, details[ids[i]], want)
		}
	}
}

// TestCompleteBatchBoundsItsSize: an empty batch and one of more than 256
// results are refused as a whole, saying the bounds.
func TestCompleteBatchBoundsItsSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	proxy := e.proxyClient()
	tooMany := make([]*automatorv1.CompleteRequest, 257)
	for i := range tooMany {
		tooMany[i] = &automatorv1.CompleteRequest{WorkId: fmt.Sprintf("w_%d", i), ClaimId: "c_x", Outcome: automatorv1.Outcome_OUTCOME_FAILED}
	}
	for name, results := range map[string][]*automatorv1.CompleteRequest{"empty": nil, "257 results": tooMany} {
		_, err := proxy.CompleteBatch(context.Background(), &automatorv1.CompleteBatchRequest{Results: results})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1 to 256 results") {
			t.Errorf("%s: %v, want InvalidArgument naming the bounds", name, err)
		}
	}
}
