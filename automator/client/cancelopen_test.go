package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestACancelAnsweredWithTheUnitOpenIsNoSuccess: ExecuteOnProxy whose
// context ends cancels its unit; an automator of before 2026-12-07 could
// answer a cancel past the deadline with the unit still open (its expiry
// passed over a row another session held), which ExecuteOnProxy told as a
// success with exit code 0 (a review). It is an error matching the
// context's, not a success and not a cancellation.
func TestACancelAnsweredWithTheUnitOpenIsNoSuccess(t *testing.T) {
	t.Parallel()
	answerOpen := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*automatorv1.CancelRequest); ok {
			return &automatorv1.WorkStatus{WorkId: r.GetWorkId(), State: automatorv1.State_STATE_QUEUED}, nil
		}
		return handler(ctx, req)
	}
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{answerOpen}})
	c := newClient(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := c.ExecuteOnProxy(ctx, a.Account, client.Command{Script: "never-ran.sh"})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrCancelled) || res.WorkID == "" {
		t.Fatalf("ExecuteOnProxy whose cancel was answered with the unit queued: %+v, %v; want an error matching the context's, naming the unit", res, err)
	}
	t.Log(err)
}
