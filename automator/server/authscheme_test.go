package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/server"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAuthSchemeIsCaseInsensitive: the scheme of "authorization" is
// matched without regard to case (RFC 9110 11.1, RFC 6750 2.1), for an API
// key and for an account token alike; the rest stays as strict as it was:
// one space, then the secret exactly.
func TestAuthSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{limits: server.Limits{FailedAuthBurst: 100, FailedAuthRefill: time.Minute}})
	conn := e.bareConn()
	caller := automatorv1.NewAutomatorServiceClient(conn)
	proxy := automatorv1.NewProxyServiceClient(conn)
	with := func(auth string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", auth)
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		if _, err := caller.ListInstances(with(scheme+" "+e.apiKey), &automatorv1.ListInstancesRequest{Account: e.account}); err != nil {
			t.Errorf("API key as %q: %v, want it accepted", scheme+" <key>", err)
		}
		_, err := proxy.Complete(with(scheme+" "+e.token), &automatorv1.CompleteRequest{WorkId: "w_0123456789abcdef0123456789abcdef"})
		if c := status.Code(err); c == codes.Unauthenticated || c == codes.ResourceExhausted {
			t.Errorf("account token as %q: %v, want it accepted", scheme+" <token>", err)
		}
	}
	for _, auth := range []string{
		"Bearer  " + e.apiKey, // two spaces
		"Bearer" + e.apiKey,   // none
		"Bearer " + e.apiKey + " ",
		"Basic " + e.apiKey,
		"Bearers " + e.apiKey,
		"bearer ",
		"BEARER",
		e.apiKey,
	} {
		if _, err := caller.ListInstances(with(auth), &automatorv1.ListInstancesRequest{Account: e.account}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("authorization %q: %v, want Unauthenticated", auth, err)
		}
	}
	// Two credentials are refused as such, not as none.
	twice := metadata.AppendToOutgoingContext(with("Bearer "+e.apiKey), "authorization", "Bearer "+e.apiKey)
	if _, err := caller.ListInstances(twice, &automatorv1.ListInstancesRequest{Account: e.account}); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "more than one") {
		t.Errorf("two authorization values: %v, want Unauthenticated saying there is more than one", err)
	}
}

// bareConn is a connection to the automator that sends no credential of
// its own: each call sets its "authorization".
func (e *env) bareConn() *grpc.ClientConn {
	e.t.Helper()
	tlsCfg, err := pki.ClientTLS(e.caPEM, "127.0.0.1")
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}
