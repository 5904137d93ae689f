package server_test

import (
	"context"
	"strings"
	"sync"
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

func keyedRequest(account, key string) *automatorv1.ExecuteRequest {
	return &automatorv1.ExecuteRequest{
		Account: account, IdempotencyKey: key, Timeout: durationpb.New(time.Minute),
		Command: &automatorv1.Command{Script: "x.sh", Args: []string{"a"}, Env: map[string]string{"K": "V"}},
	}
}

// TestConcurrentSubmitsWithOneKeyQueueOneUnit: 20 submits with one key at
// once return one unit, and only one unit can be claimed.
func TestConcurrentSubmitsWithOneKeyQueueOneUnit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	caller := e.callerClient()
	const n = 20
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := caller.Submit(context.Background(), keyedRequest(e.account, "k-1"))
			ids[i], errs[i] = st.GetWorkId(), err
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("submit %d: %q, %v; want unit %q like submit 0", i, ids[i], errs[i], ids[0])
		}
	}
	resp, err := e.proxyClient().Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 100, Wait: durationpb.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != ids[0] {
		t.Fatalf("claimed %d units, want exactly unit %s", len(resp.GetClaims()), ids[0])
	}
}

// TestExecuteWithAUsedKeyReturnsTheFirstOutcome: ExecuteOnProxy with the
// key of a unit that already ended answers with that unit at once.
func TestExecuteWithAUsedKeyReturnsTheFirstOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	caller, proxy := e.callerClient(), e.proxyClient()
	first, err := caller.Submit(ctx, keyedRequest(e.account, "k-2"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v", err)
	}
	c := resp.GetClaims()[0]
	if _, err := proxy.Complete(ctx, &automatorv1.CompleteRequest{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a", Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED,
		SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{ExitCode: 4, Stdout: []byte("first")}),
	}); err != nil {
		t.Fatal(err)
	}
	st, err := caller.ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy with a used key to answer with the first unit's outcome"), keyedRequest(e.account, "k-2"))
	if err != nil {
		t.Fatal(err)
	}
	if st.GetWorkId() != first.GetWorkId() || st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != "first" {
		t.Fatalf("repeat: %v; want the first unit's outcome", st)
	}
	other := keyedRequest(e.account, "k-2")
	other.Command.Env["K"] = "W"
	_, err = caller.Submit(ctx, other)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), first.GetWorkId()) {
		t.Fatalf("the key with another command: %v; want InvalidArgument naming %s", err, first.GetWorkId())
	}
}

// TestARetryAtTheQueueCapReturnsItsUnit: with the account's queue full, a
// retry of a submit whose unit is in that queue (its answer lost) gets the
// unit, not ResourceExhausted; a new key, or the key with another command,
// is still refused, and nothing more is queued.
func TestARetryAtTheQueueCapReturnsItsUnit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{limits: server.Limits{MaxQueuedPerAccount: 1}})
	ctx := context.Background()
	caller := e.callerClient()
	first, err := caller.Submit(ctx, keyedRequest(e.account, "k-cap"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := caller.Submit(ctx, keyedRequest(e.account, "k-cap"))
	if err != nil || again.GetWorkId() != first.GetWorkId() {
		t.Fatalf("retry at the cap: %q, %v; want unit %q", again.GetWorkId(), err, first.GetWorkId())
	}
	if _, err := caller.Submit(ctx, keyedRequest(e.account, "k-new")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a new key at the cap: %v, want ResourceExhausted", err)
	}
	other := keyedRequest(e.account, "k-cap")
	other.Command.Args = []string{"b"}
	if _, err := caller.Submit(ctx, other); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the key with another command at the cap: %v, want InvalidArgument", err)
	}
	resp, err := e.proxyClient().Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 10, Wait: durationpb.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != first.GetWorkId() {
		t.Fatalf("claimed %d units, want exactly unit %s", len(resp.GetClaims()), first.GetWorkId())
	}
	log := e.auditLog()
	if n := countKind(log, store.AuditWorkDuplicate); n != 1 {
		t.Errorf("audit log holds %d work.duplicate events, want 1", n)
	}
	if n := countKind(log, store.AuditWorkRefused); n != 1 {
		t.Errorf("audit log holds %d work.refused events, want 1 (the new key's)", n)
	}
}

// TestARetryWithTheKeyOfAUnitWhoseCommandWasLostReturnsThatUnit: a unit
// `automator repair --salvage` kept in place of one whose row was lost
// has no command to compare a retry's with; a retry with its key gets
// that unit, ended, with its reason, rather than an internal error or a
// second run.
func TestARetryWithTheKeyOfAUnitWhoseCommandWasLostReturnsThatUnit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	now := time.Now()
	if _, err := e.store.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-lost", Account: e.account, KeyID: 0, SealedCommand: []byte{},
		IdempotencyKey: "k-lost", Now: now, Deadline: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.WorkCancel(ctx, store.WorkCancelParams{ID: "w-lost", Reason: "lost: its row was damaged", Now: now}); err != nil {
		t.Fatal(err)
	}
	st, err := e.callerClient().ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy with the key of a lost unit"), keyedRequest(e.account, "k-lost"))
	if err != nil || st.GetWorkId() != "w-lost" || st.GetState() != automatorv1.State_STATE_CANCELLED || !strings.Contains(st.GetReason(), "lost: its row was damaged") {
		t.Fatalf("ExecuteOnProxy with the key of a unit whose command was lost: %v, %v; want that unit, ended, with its reason", st, err)
	}
}
