package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// retryInfo is the delay of err's google.rpc.RetryInfo detail; ok is
// false when it carries none.
func retryInfo(err error) (delay time.Duration, ok bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, is := d.(*errdetails.RetryInfo); is {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// errorInfo is err's google.rpc.ErrorInfo detail, nil when it carries none.
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, is := d.(*errdetails.ErrorInfo); is {
			return ei
		}
	}
	return nil
}

// TestTryAgainLaterCarriesRetryInfo: the ResourceExhausted refusals that
// a later call of the same may get past say when to try again, in a
// google.rpc.RetryInfo detail (which the HTTP gateway makes a Retry-After
// header): the account's queue at its cap (1 s: it is counted afresh for
// every new unit while it is full), and the failed-authentication budget
// (the time until the address may fail once more); and which of the two
// refused the call, in a google.rpc.ErrorInfo.
func TestTryAgainLaterCarriesRetryInfo(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, limits: server.Limits{MaxQueuedPerAccount: 1, FailedAuthBurst: 2, FailedAuthRefill: time.Minute}})
	caller := e.callerClient()
	submitScript(t, caller, e.account, "x.sh", time.Minute)
	_, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
	if d, ok := retryInfo(err); status.Code(err) != codes.ResourceExhausted || !ok || d != time.Second {
		t.Errorf("a unit past the queue's cap: %v with RetryInfo %v (%v); want ResourceExhausted, retry in 1s", err, d, ok)
	}
	// Which limit refused it, for a caller to tell a unit it may submit
	// again (nothing was queued) from a wrong key (below).
	if ei := errorInfo(err); ei.GetReason() != grpcwire.ReasonQueueFull || ei.GetDomain() != grpcwire.ErrorDomain || ei.GetMetadata()["account"] != e.account {
		t.Errorf("a unit past the queue's cap: ErrorInfo %v; want reason %s, domain %s, account %s", ei, grpcwire.ReasonQueueFull, grpcwire.ErrorDomain, e.account)
	}

	bad := automatorv1.NewAutomatorServiceClient(e.conn("oak_wrong"))
	list := func() error {
		_, err := bad.ListInstances(context.Background(), &automatorv1.ListInstancesRequest{Account: e.account})
		return err
	}
	for range 2 {
		err := list()
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("a wrong key within the budget: %v, want Unauthenticated", err)
		}
		if d, ok := retryInfo(err); ok {
			t.Errorf("a wrong key within the budget carries RetryInfo %v: the same key again never helps", d)
		}
	}
	for _, wait := range []time.Duration{time.Minute, 45 * time.Second} {
		err := list()
		if d, ok := retryInfo(err); status.Code(err) != codes.ResourceExhausted || !ok || d != wait {
			t.Errorf("a wrong key past the budget: %v with RetryInfo %v (%v); want ResourceExhausted, retry in %v", err, d, ok, wait)
		}
		if ei := errorInfo(err); ei.GetReason() != grpcwire.ReasonTooManyFailedAuthentications || ei.GetDomain() != grpcwire.ErrorDomain {
			t.Errorf("a wrong key past the budget: ErrorInfo %v; want reason %s, domain %s", ei, grpcwire.ReasonTooManyFailedAuthentications, grpcwire.ErrorDomain)
		}
		clock.Advance(15 * time.Second)
	}
}
