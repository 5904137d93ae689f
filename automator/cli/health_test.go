//go:build linux

package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// healthOver serves health service h on a loopback socket and
// returns a client of it.
func healthOver(t *testing.T, h *healthServer) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, h)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestGRPCHealthCheckAnswersAsReadyzDoes: the gRPC health service says
// SERVING exactly when /readyz says ready: NOT_SERVING while the store
// fails, while it does not answer (within its bound, so a caller that gives
// a check 2 s hears from an automator whose store hangs), and once the
// automator is shutting down; for the overall health and each service of
// the API alike, NOT_FOUND for any other service; and its store errors go
// to the log shared with /readyz, once per change, never into the answer.
func TestGRPCHealthCheckAnswersAsReadyzDoes(t *testing.T) {
	t.Parallel()
	var buf logtest.Buffer
	var (
		down     atomic.Pointer[error]
		hang     atomic.Bool
		stopping atomic.Bool
	)
	ready := newReadiness(pingerFunc(func(ctx context.Context) error {
		if hang.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		if e := down.Load(); e != nil {
			return *e
		}
		return nil
	}), stopping.Load, slog.New(slog.NewTextHandler(&buf, nil)))
	hs := newHealthServer(ready)
	hs.reuse = 0 // every check asks the store
	h := healthOver(t, hs)
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		return resp.GetStatus()
	}
	services := []string{"", automatorv1.AutomatorService_ServiceDesc.ServiceName, automatorv1.ProxyService_ServiceDesc.ServiceName}
	want := func(state string, st healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, s := range services {
			if got := check(s); got != st {
				t.Errorf("%s: Check(%q) = %v, want %v", state, s, got, st)
			}
		}
		list, err := h.List(t.Context(), &healthpb.HealthListRequest{})
		if err != nil {
			t.Fatalf("%s: List: %v", state, err)
		}
		if len(list.GetStatuses()) != len(services) {
			t.Errorf("%s: List has %d services, want %d", state, len(list.GetStatuses()), len(services))
		}
		for _, s := range services {
			if got := list.GetStatuses()[s].GetStatus(); got != st {
				t.Errorf("%s: List says %q is %v, want %v", state, s, got, st)
			}
		}
	}

	want("serving", healthpb.HealthCheckResponse_SERVING)
	gone := errors.New("pinging postgres store postgres://automator@db-7.internal:5432/queue: connection refused")
	down.Store(&gone)
	want("store down", healthpb.HealthCheckResponse_NOT_SERVING)
	down.Store(nil)
	want("store back", healthpb.HealthCheckResponse_SERVING)
	hang.Store(true)
	if got := check(""); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("store hanging: Check = %v, want NOT_SERVING", got)
	}
	hang.Store(false)
	stopping.Store(true)
	want("shutting down", healthpb.HealthCheckResponse_NOT_SERVING)

	_, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "grpc.reflection.v1.ServerReflection"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("Check of a service the automator does not serve: %v, want NotFound", err)
	}
	// Watch is not served: a client told so uses Check.
	if w, err := h.Watch(t.Context(), &healthpb.HealthCheckRequest{}); err == nil {
		if _, err = w.Recv(); status.Code(err) != codes.Unimplemented {
			t.Errorf("Watch: %v, want Unimplemented", err)
		}
	}

	log := buf.String()
	for _, line := range []string{`msg="not ready" err="pinging postgres store`, `msg="ready again"`, `msg="not ready" err="context deadline exceeded"`} {
		if strings.Count(log, line) != 1 {
			t.Errorf("the log has %q %d times, want once:\n%s", line, strings.Count(log, line), log)
		}
	}
}

// TestServeAnswersTheGRPCHealthCheckWithoutCredentials: `automator serve`
// serves the standard health service on its gRPC listener, over its TLS,
// to a caller with no key or token (a load balancer's or Kubernetes'
// check), and says SERVING while it serves.
func TestServeAnswersTheGRPCHealthCheckWithoutCredentials(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(s.tlsConfig(t))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Check of a serving automator: %v %v, want SERVING", resp, err)
	}
	if strings.Contains(s.log.String(), "not ready") {
		t.Errorf("serve logged not ready while it served:\n%s", s.log)
	}
}

// TestGRPCHealthChecksShareTheirStoreChecks: the health service answers
// anyone who reaches the gRPC listener, so a flood of checks must not become
// a flood of store checks (each holds a connection of the store's pool):
// concurrent checks share one store check, never two at once, and a store
// check's answer serves the checks that come soon after it.
func TestGRPCHealthChecksShareTheirStoreChecks(t *testing.T) {
	t.Parallel()
	// Each store check hangs until its bound: with a store check per
	// health check, all of them would be under way at once.
	var pings, inside, most atomic.Int64
	ready := newReadiness(pingerFunc(func(ctx context.Context) error {
		pings.Add(1)
		n := inside.Add(1)
		defer inside.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-ctx.Done()
		return ctx.Err()
	}), func() bool { return false }, slog.New(slog.DiscardHandler))
	hs := newHealthServer(ready)
	hs.reuse = 0
	h := healthOver(t, hs)

	const checks = 40
	answers := make(chan error, checks)
	for range checks {
		go func() {
			resp, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{})
			if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
				err = errors.New(resp.GetStatus().String())
			}
			answers <- err
		}()
	}
	for range checks {
		if err := waittest.Recv(t, answers, "a health check's answer"); err != nil {
			t.Errorf("health check with the store hanging: %v, want NOT_SERVING", err)
		}
	}
	if most.Load() != 1 {
		t.Errorf("%d store checks were under way at once for %d concurrent health checks, want 1", most.Load(), checks)
	}
	if pings.Load() >= checks {
		t.Errorf("%d health checks made %d store checks, want fewer", checks, pings.Load())
	}

	// An answer serves the checks within reuse of it.
	ready.st = pingerFunc(func(context.Context) error { pings.Add(1); return nil })
	hs.mu.Lock()
	hs.reuse = time.Hour
	hs.mu.Unlock()
	before := pings.Load()
	for range 5 {
		if _, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := pings.Load() - before; n > 1 {
		t.Errorf("5 checks in a row within the reuse window made %d store checks, want at most 1", n)
	}
}

// TestGRPCHealthCheckSaysNotServingAtOnceWhenShuttingDown: a store check's
// answer serves the checks that come within reuse of it, but not past the
// start of a shutdown: from then on every check says NOT_SERVING, as
// /readyz does, so that a load balancer sends no more callers to it.
func TestGRPCHealthCheckSaysNotServingAtOnceWhenShuttingDown(t *testing.T) {
	t.Parallel()
	var stopping atomic.Bool
	ready := newReadiness(pingerFunc(func(context.Context) error { return nil }), stopping.Load, slog.New(slog.DiscardHandler))
	hs := newHealthServer(ready)
	hs.reuse = time.Hour // the first store check's answer serves every later check
	h := healthOver(t, hs)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return resp.GetStatus()
	}
	if got := check(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("before the shutdown: Check = %v, want SERVING", got)
	}
	stopping.Store(true)
	if got := check(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("once shutting down, within reuse of a store check that answered: Check = %v, want NOT_SERVING", got)
	}
	list, err := h.List(t.Context(), &healthpb.HealthListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := list.GetStatuses()[""].GetStatus(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("once shutting down: List says %v, want NOT_SERVING", got)
	}
}
