//go:build linux

package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// Client dials the automator's caller API the way `automator exec
// --data-dir` does: TLS trusting the data directory's CA, the admin API key
// as a bearer token. The connection survives automator restarts (it
// reconnects), and is closed when the test ends.
func (a *automator) Client(t *testing.T) automatorv1.AutomatorServiceClient {
	t.Helper()
	return proctest.Caller(t, a.DataDir, a.GRPCAddr)
}

// waitWork waits by id until the unit ends, calling Wait again while the
// automator is unavailable (restarting), as a reconnecting caller does.
func waitWork(ctx context.Context, c automatorv1.AutomatorServiceClient, id string) (*automatorv1.WorkStatus, error) {
	for {
		st, err := c.Wait(ctx, &automatorv1.WaitRequest{WorkId: id})
		if status.Code(err) != codes.Unavailable {
			return st, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
