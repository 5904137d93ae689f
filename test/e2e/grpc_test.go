//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// Client dials the automator's caller API the way `automator exec
// --data-dir` does: TLS trusting the data directory's CA, the admin API key
// as a bearer token. The connection survives automator restarts (it
// reconnects), and is closed when the test ends.
func (a *automator) Client(t *testing.T) automatorv1.AutomatorServiceClient {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(a.DataDir, config.FileCACert))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(a.DataDir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ClientTLS(caPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+a.GRPCAddr,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(key)))),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return automatorv1.NewAutomatorServiceClient(conn)
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

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
