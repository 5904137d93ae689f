package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestResultPastTheLimitIsRefusedAndTheLargestAProxyMakesIsDelivered: a
// posted result larger than any a proxy makes (each output stream at most
// 2 MiB, its max_output_bytes at most) is refused with InvalidArgument
// naming the limit, and the unit stays claimed: stored, it would take
// room for no one, and near the message limit (8 MiB) no answer could
// carry it to its caller. A result with both streams at 2 MiB is accepted
// and reaches the caller whole.
func TestResultPastTheLimitIsRefusedAndTheLargestAProxyMakesIsDelivered(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	proxy := automatorv1.NewProxyServiceClient(a.ProxyConn(t))
	ctx := context.Background()
	if _, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: a.Account, Command: &automatorv1.Command{Script: "x"}, Timeout: durationpb.New(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1, Wait: durationpb.New(0)})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %d claims, %v", len(resp.GetClaims()), err)
	}
	c := resp.GetClaims()[0]
	complete := func(r *automatorv1.Result) error {
		t.Helper()
		plain, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := crypto.Seal(a.Key, a.Account, c.GetWorkId(), crypto.DirResult, plain)
		if err != nil {
			t.Fatal(err)
		}
		_, err = proxy.Complete(ctx, &automatorv1.CompleteRequest{
			WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: sealed,
		})
		return err
	}
	err = complete(&automatorv1.Result{Stdout: make([]byte, 7<<20), InstanceId: "a"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a result with 7 MiB of stdout: %v; want InvalidArgument naming the limit", err)
	}
	if err := complete(&automatorv1.Result{Stdout: make([]byte, 2<<20), Stderr: make([]byte, 2<<20), StdoutTruncated: true, StderrTruncated: true, InstanceId: "a"}); err != nil {
		t.Fatalf("a result with both streams at 2 MiB: %v", err)
	}
	ws, err := caller.Wait(ctx, &automatorv1.WaitRequest{WorkId: c.GetWorkId()})
	if err != nil {
		t.Fatalf("waiting for the unit: %v", err)
	}
	if ws.GetState() != automatorv1.State_STATE_SUCCEEDED || len(ws.GetResult().GetStdout()) != 2<<20 || len(ws.GetResult().GetStderr()) != 2<<20 {
		t.Fatalf("the caller got %v with %d bytes of stdout and %d of stderr; want succeeded, 2 MiB each", ws.GetState(), len(ws.GetResult().GetStdout()), len(ws.GetResult().GetStderr()))
	}
}

// TestASealedResultAtTheLimitIsRecordedAndOneByteOverIsRefused: the limit
// on a sealed result is the largest size recorded, not the smallest
// refused: a genuine result sealed to exactly server.MaxSealedResult bytes
// is recorded and reaches its caller whole; one a byte longer, posted
// first, is refused with InvalidArgument naming the limit and leaves the
// unit claimed.
func TestASealedResultAtTheLimitIsRecordedAndOneByteOverIsRefused(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	proxy := automatorv1.NewProxyServiceClient(a.ProxyConn(t))
	ctx := context.Background()
	st, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: a.Account, Command: &automatorv1.Command{Script: "x"}, Timeout: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1, Wait: durationpb.New(0)})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %d claims, %v", len(resp.GetClaims()), err)
	}
	c := resp.GetClaims()[0]
	// sealedOf seals a result whose stdout makes it exactly size bytes.
	sealedOf := func(size int) (sealed []byte, stdout int) {
		t.Helper()
		n := size
		for range 4 {
			plain, err := proto.Marshal(&automatorv1.Result{Stdout: make([]byte, n), InstanceId: "a"})
			if err != nil {
				t.Fatal(err)
			}
			b, err := crypto.Seal(a.Key, a.Account, c.GetWorkId(), crypto.DirResult, plain)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == size {
				return b, n
			}
			n += size - len(b)
		}
		t.Fatalf("no stdout seals to %d bytes", size)
		return nil, 0
	}
	complete := func(sealed []byte) error {
		_, err := proxy.Complete(ctx, &automatorv1.CompleteRequest{
			WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: sealed,
		})
		return err
	}
	over, _ := sealedOf(server.MaxSealedResult + 1)
	if err := complete(over); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a result sealed to the limit plus one byte: %v; want InvalidArgument naming the limit", err)
	}
	atLimit, want := sealedOf(server.MaxSealedResult)
	if err := complete(atLimit); err != nil {
		t.Fatalf("a result sealed to exactly the limit, after the refused one: %v; want it recorded", err)
	}
	ws, err := caller.Wait(ctx, &automatorv1.WaitRequest{WorkId: st.GetWorkId()})
	if err != nil {
		t.Fatalf("waiting for the unit: %v", err)
	}
	if ws.GetState() != automatorv1.State_STATE_SUCCEEDED || len(ws.GetResult().GetStdout()) != want {
		t.Fatalf("the caller got %v with %d bytes of stdout; want succeeded with %d", ws.GetState(), len(ws.GetResult().GetStdout()), want)
	}
}
