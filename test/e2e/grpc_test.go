//go:build linux

package e2e

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/grpcwire/wiretest"
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

// TestServeUsesFixedFlowControlWindows speaks raw HTTP/2 over TLS to
// `automator serve`: it announces grpcwire's fixed windows, and a request's
// data draws no PING from it (the bandwidth probes of dynamic windows cost
// every poll and every call a PING and its answer; docs/performance.md).
func TestServeUsesFixedFlowControlWindows(t *testing.T) {
	a := startAutomator(t)
	caPEM, err := os.ReadFile(filepath.Join(a.DataDir, config.FileCACert))
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ClientTLS(caPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.NextProtos = []string{"h2"}
	c, err := tls.Dial("tcp", a.GRPCAddr, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wiretest.CheckServer(t, c)
}
