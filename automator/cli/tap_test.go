//go:build linux

package cli

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestServeRefusesACallWithoutACredentialBeforeItsRequest: serve checks a
// call's credential from its headers (server.TapHandle), so a call that
// never sends its request is refused at once rather than held until its
// request is whole (up to 8 MiB each, before any credential was looked
// at). The server package's test covers the cases; this one, that serve
// installs the check.
func TestServeRefusesACallWithoutACredentialBeforeItsRequest(t *testing.T) {
	t.Parallel()
	s := serveDirInProcess(t, initDir(t))
	cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(s.tlsConfig(t))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// The deadline only bounds the test when the refusal does not come.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/automator.v1.AutomatorService/Submit")
	if err == nil {
		err = st.RecvMsg(&automatorv1.WorkStatus{})
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a submit without a credential whose request is never sent: %v, want Unauthenticated before the request", err)
	}
}
