package cli

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// healthServer is the standard gRPC health service (grpc.health.v1.Health)
// on the gRPC listener, for load balancers and orchestrators that check a
// gRPC port itself (Kubernetes' grpc probes, Envoy, cloud balancers):
// SERVING exactly when /readyz answers 200, NOT_SERVING otherwise. It
// needs no credentials and tells nothing more than up or down, as /readyz.
//
// The overall health (the service "") and each service of the API answer
// alike: both serve from the same store. Watch is not served (a client
// told UNIMPLEMENTED checks with Check instead, as the protocol says): a
// watch would hold a goroutine and a timer for anyone who connects.
//
// The gRPC listener faces the proxies' networks and answers this without a
// credential, so checks do not reach the store each: concurrent checks
// share one store check, and its answer serves the checks that come within
// reuse of it. However many checks come, the store sees at most one at a
// time and about four a second.
type healthServer struct {
	healthpb.UnimplementedHealthServer
	ready *readiness
	reuse time.Duration // healthReuse; tests set less

	mu     sync.Mutex
	flight *healthFlight // the latest store check, under way or done
}

// healthFlight is one store check that health checks share.
type healthFlight struct {
	done chan struct{} // closed when err and at are set
	err  error
	at   time.Time
}

// healthReuse is how long a store check's answer serves later checks.
const healthReuse = 250 * time.Millisecond

func newHealthServer(ready *readiness) *healthServer {
	return &healthServer{ready: ready, reuse: healthReuse}
}

// healthBound bounds the store check of a health check: well within the
// 2 s the Go client gives a probe (automator/client, stuckIn), so an
// automator whose store hangs still answers it, NOT_SERVING.
const healthBound = time.Second

// healthServices are the names a health check may ask about.
var healthServices = []string{"", automatorv1.AutomatorService_ServiceDesc.ServiceName, automatorv1.ProxyService_ServiceDesc.ServiceName}

func (h *healthServer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !slices.Contains(healthServices, req.GetService()) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q: this automator serves %q, %q and the overall health (\"\")", req.GetService(), healthServices[1], healthServices[2])
	}
	st, err := h.status(ctx)
	if err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

func (h *healthServer) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	st, err := h.status(ctx)
	if err != nil {
		return nil, err
	}
	resp := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, s := range healthServices {
		resp.Statuses[s] = &healthpb.HealthCheckResponse{Status: st}
	}
	return resp, nil
}

// status is the automator's readiness as a serving status, or ctx's error
// when the caller gave up first.
func (h *healthServer) status(ctx context.Context) (healthpb.HealthCheckResponse_ServingStatus, error) {
	if h.ready.stopping() {
		return healthpb.HealthCheckResponse_NOT_SERVING, nil
	}
	h.mu.Lock()
	f := h.flight
	if f == nil || f.stale(h.reuse) {
		f = &healthFlight{done: make(chan struct{})}
		h.flight = f
		go func() {
			// Not the caller's ctx: the others waiting on it did not give up.
			f.err = h.ready.check(context.Background(), healthBound)
			f.at = time.Now()
			close(f.done)
		}()
	}
	h.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		return 0, status.FromContextError(ctx.Err()).Err()
	}
	if f.err != nil {
		return healthpb.HealthCheckResponse_NOT_SERVING, nil
	}
	return healthpb.HealthCheckResponse_SERVING, nil
}

// stale: f is done and older than reuse.
func (f *healthFlight) stale(reuse time.Duration) bool {
	select {
	case <-f.done:
		return time.Since(f.at) >= reuse
	default:
		return false
	}
}
