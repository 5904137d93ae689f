package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/closedport"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestASubmitCutByItsCallerSaysWhetherAUnitMayExist: a caller whose
// submit ends before any answer (Ctrl-C) learns whether the automator may
// have queued the unit: not when the submit never reached one (no
// connection was ever set up), as it may when the submit was sent. Before,
// both read "stopped", with no verdict (a review).
func TestASubmitCutByItsCallerSaysWhetherAUnitMayExist(t *testing.T) {
	t.Parallel()
	t.Run("never sent", func(t *testing.T) {
		t.Parallel()
		ca, err := pki.NewCA("test CA", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// Accepted, then silent: the TLS handshake never ends.
		hold := make(chan struct{})
		addr := closedport.Accepting(t, func(net.Conn) { <-hold })
		t.Cleanup(func() { close(hold) }) // before Accepting's, which waits for its handler
		c, err := client.New(client.Config{Addresses: []string{"https://" + addr}, APIKey: "oak_x", CAPEM: ca.CertPEM, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = c.Submit(ctx, "acme", client.Command{Script: "x.sh"})
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "it reached no automator: nothing was queued") {
			t.Fatalf("Submit cut before a connection was set up: %v; want the context's end, saying nothing was queued", err)
		}
	})
	t.Run("sent, unanswered", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
			func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if info.FullMethod == automatorv1.AutomatorService_Submit_FullMethodName {
					arrived <- struct{}{}
					<-ctx.Done() // never answered
					return nil, ctx.Err()
				}
				return h(ctx, req)
			},
		}})
		c := newClient(t, a)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := c.Submit(ctx, a.Account, client.Command{Script: "x.sh"}); done <- err }()
		waittest.Recv(t, arrived, "the submit to reach the automator")
		cancel()
		err := waittest.Recv(t, done, "Submit to end once cut")
		if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no answer came to it: the automator may have queued the unit") {
			t.Fatalf("Submit cut after it was sent: %v; want the context's end, saying the automator may have queued the unit", err)
		}
	})
}
