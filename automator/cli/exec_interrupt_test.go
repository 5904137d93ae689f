//go:build linux

package cli_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/cli"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestExecInterruptedWhileItsSubmitIsAnsweredCancelsTheUnit: Ctrl-C after
// the automator stored exec's unit but before its answer reached exec (a
// slow automator; here the answer is held until exec is interrupted, so
// the interrupt always comes first) must still cancel the unit (README:
// "Ctrl-C cancels the unit"; docs/api.md: exec then exits 126), not leave
// it queued for a proxy to run unseen: exec's idempotency key is the
// client's, made per call, so the user could not find it.
func TestExecInterruptedWhileItsSubmitIsAnsweredCancelsTheUnit(t *testing.T) {
	t.Parallel()
	stored := make(chan struct{}, 1)
	interrupted := make(chan struct{})
	slowSubmit := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if info.FullMethod == automatorv1.AutomatorService_Submit_FullMethodName && err == nil {
			stored <- struct{}{}
			select { // the answer is late: the caller is interrupted first
			case <-interrupted:
			case <-ctx.Done():
			}
		}
		return resp, err
	}
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{slowSubmit}})
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan execResult, 1)
	go func() { done <- execCLI(ctx, a, "", "--account", "acme", "--timeout", "60s", "x.sh") }()
	waittest.Recv(t, stored, "the unit to be stored")
	interrupt()
	close(interrupted)
	r := waittest.Recv(t, done, "exec to return once interrupted")
	list, err := a.Store.WorkList(context.Background(), store.WorkListParams{Limit: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("units: %d, %v; want the one exec queued", len(list), err)
	}
	if list[0].State != store.StateCancelled || r.code != cli.ExitCancelled {
		t.Fatalf("exec interrupted after its unit was stored: exit %d, stderr %q; unit %s left %s; want exit 126 and the unit cancelled",
			r.code, r.stderr, list[0].ID, list[0].State)
	}
}
