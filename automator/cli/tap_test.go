//go:build linux

package cli

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/internal/waittest"
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
	cc := serveDirInProcess(t, initDir(t)).noCredential(t)
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

// TestServeBoundsHealthChecksThatNeverSendTheirRequest: the gRPC health
// service needs no credential, and gRPC reads a call's whole request (up to
// 8 MiB) before its handler runs, so health calls that never finished their
// request held it without bound. At most 4 are open at once from one
// source (the next is refused at once, ResourceExhausted), and each ends
// within 5 s, its request sent or not; then health checks are answered
// again.
func TestServeBoundsHealthChecksThatNeverSendTheirRequest(t *testing.T) {
	t.Parallel()
	cc := serveDirInProcess(t, initDir(t)).noCredential(t)
	const check = "/grpc.health.v1.Health/Check"
	// No deadline of the test's own: the calls end on the automator's.
	ctx := t.Context()
	open := func() grpc.ClientStream {
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, check)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	var held []grpc.ClientStream
	for range 4 {
		held = append(held, open())
	}
	ended := make(chan error, len(held)+1)
	recv := func(st grpc.ClientStream) {
		go func() { ended <- st.RecvMsg(&healthpb.HealthCheckResponse{}) }()
	}
	recv(open())
	if err := waittest.Recv(t, ended, "a fifth health check that never sends its request to be refused"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fifth health check that never sends its request, from the same source: %v; want ResourceExhausted at once", err)
	}
	for _, st := range held {
		recv(st)
	}
	for i := range held {
		if err := waittest.Recv(t, ended, "a health check that never sent its request to end"); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("health check %d that never sent its request: %v; want it ended by the automator (DeadlineExceeded)", i, err)
		}
	}
	automatortest.WaitFor(t, 10*time.Second, "a health check to be answered once the others ended", func() bool {
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

// noCredential is a connection to the served gRPC listener that presents
// no credential, closed when the test ends.
func (s *served) noCredential(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(s.tlsConfig(t))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
