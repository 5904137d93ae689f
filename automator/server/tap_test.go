package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/pki"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestACallWithoutAValidCredentialIsRefusedBeforeItsRequestIsRead: gRPC
// receives a unary call's whole request (up to 8 MiB) before any
// interceptor runs, so a credential checked only there let anyone who
// could reach the listener hold 8 MiB per open call, as many calls as they
// liked. The credential is checked from the call's headers: a call that
// never sends its request, without a credential or with a wrong one, is
// answered Unauthenticated at once, where it used to wait for its request
// (here, until its deadline). A valid credential's call is then served.
func TestACallWithoutAValidCredentialIsRefusedBeforeItsRequestIsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	tlsCfg, err := pki.ClientTLS(e.caPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	none, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { none.Close() })
	const (
		poll   = "/automator.v1.ProxyService/Poll"
		submit = "/automator.v1.AutomatorService/Submit"
	)
	for _, c := range []struct {
		name   string
		cc     *grpc.ClientConn
		method string
	}{
		{"a poll without a credential", none, poll},
		{"a poll with a wrong token", e.conn("opt_wrong"), poll},
		{"a poll with an API key", e.conn(e.apiKey), poll},
		{"a submit without a credential", none, submit},
		{"a submit with a wrong API key", e.conn("oak_wrong"), submit},
	} {
		// The call's deadline only bounds the test when the refusal does
		// not come: the request is never sent, so nothing else ends it.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		st, err := c.cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, c.method)
		if err == nil {
			err = st.RecvMsg(&automatorv1.PollResponse{})
		}
		cancel()
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s whose request is never sent: %v, want Unauthenticated before the request", c.name, err)
		}
	}
	// The same connections' valid calls are served.
	// (A Complete without a work id is refused only once authenticated.)
	if _, err := e.proxyClient().Complete(t.Context(), &automatorv1.CompleteRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a complete without a work id, with the account's token: %v, want InvalidArgument", err)
	}
	if _, err := e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x"}}); err != nil {
		t.Errorf("a submit with the API key: %v", err)
	}
}
