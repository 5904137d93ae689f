package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// fakeService answers Submit with a queued unit and Get with the largest
// unit a proxy makes: both output streams at the proxy's highest
// max_output_bytes (2 MiB), over gRPC's default 4 MiB together.
type fakeService struct {
	automatorv1.UnimplementedAutomatorServiceServer
}

const largestOutput = 2 << 20

func (fakeService) Submit(context.Context, *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	return &automatorv1.WorkStatus{WorkId: "w_1", Account: "acme", State: automatorv1.State_STATE_QUEUED}, nil
}

func (fakeService) Get(_ context.Context, r *automatorv1.GetRequest) (*automatorv1.WorkStatus, error) {
	return &automatorv1.WorkStatus{WorkId: r.GetWorkId(), Account: "acme", State: automatorv1.State_STATE_SUCCEEDED,
		Result: &automatorv1.Result{Stdout: make([]byte, largestOutput), Stderr: make([]byte, largestOutput), StdoutTruncated: true, StderrTruncated: true}}, nil
}

// mountDefault mounts the gateway with Options' defaults on a gRPC server
// of fakeService, until the test ends.
func mountDefault(t *testing.T) http.Handler {
	t.Helper()
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	automatorv1.RegisterAutomatorServiceServer(gs, fakeService{})
	ctx, cancel := context.WithCancel(context.Background())
	mux := http.NewServeMux()
	err := Mount(ctx, mux, gs, Options{Authenticate: func(context.Context, []string, string, string) error { return nil }})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); gs.Stop() })
	return mux
}

func serve(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestMountDefaultsToTheDocumentedLimits: left out, MaxMessage is 8 MiB
// (Options), so a body may be 16 MiB (docs/api.md) and not a byte more,
// and an answer as large as the largest unit a proxy makes reaches the
// caller, where gRPC's own default (4 MiB) would refuse it.
func TestMountDefaultsToTheDocumentedLimits(t *testing.T) {
	h := mountDefault(t)
	object := `{"command": {"script": "x"}}`
	if w := serve(t, h, "POST", "/v1/accounts/acme/submit", object+strings.Repeat(" ", 16<<20-len(object))); w.Code != http.StatusOK {
		t.Fatalf("a body of exactly 16 MiB: HTTP %d %.200s; want 200", w.Code, w.Body)
	}
	if w := serve(t, h, "POST", "/v1/accounts/acme/submit", object+strings.Repeat(" ", 16<<20+1-len(object))); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "larger than the limit of 16 MiB") {
		t.Fatalf("a body of 16 MiB + 1 byte: HTTP %d %.200s; want 400 naming the limit", w.Code, w.Body)
	}
	w := serve(t, h, "GET", "/v1/work/w_1", "")
	var ws struct {
		Result struct{ Stdout, Stderr []byte }
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &ws) != nil || len(ws.Result.Stdout) != largestOutput || len(ws.Result.Stderr) != largestOutput {
		t.Fatalf("a unit with both output streams at 2 MiB: HTTP %d %.200s; want 200 with both", w.Code, w.Body)
	}
}

// TestMaxBodyBoundsARequestBody: MaxBody, under twice MaxMessage, is the
// most of a body read (automator serve gives the most the largest command
// within its limits takes as JSON), and a body past it is refused saying
// what the limit is.
func TestMaxBodyBoundsARequestBody(t *testing.T) {
	gs := grpc.NewServer()
	automatorv1.RegisterAutomatorServiceServer(gs, fakeService{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Cleanup(gs.Stop)
	h := http.NewServeMux()
	const limit = 1 << 20
	if err := Mount(ctx, h, gs, Options{MaxBody: limit, Authenticate: func(context.Context, []string, string, string) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	object := `{"command": {"script": "x"}}`
	if w := serve(t, h, "POST", "/v1/accounts/acme/submit", object+strings.Repeat(" ", limit-len(object))); w.Code != http.StatusOK {
		t.Fatalf("a body of exactly MaxBody: HTTP %d %.200s; want 200", w.Code, w.Body)
	}
	w := serve(t, h, "POST", "/v1/accounts/acme/submit", object+strings.Repeat(" ", limit+1-len(object)))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "larger than the limit of 1 MiB, the most the largest command within the automator's limits takes as JSON") {
		t.Fatalf("a body of MaxBody + 1 byte: HTTP %d %.300s; want 400 naming the limit and what it is", w.Code, w.Body)
	}
}

// TestMountRequiresAuthenticate: without it a caller with no key could
// make the gateway read a whole body before the server refused the call.
func TestMountRequiresAuthenticate(t *testing.T) {
	err := Mount(t.Context(), http.NewServeMux(), grpc.NewServer(), Options{})
	if err == nil || !strings.Contains(err.Error(), "Authenticate") {
		t.Fatalf("Mount without Authenticate: %v; want an error naming it", err)
	}
}

// TestRetryAfterIsWholeSecondsRoundedUp: Retry-After is the RetryInfo
// delay in whole seconds, rounded up and never 0 (which would invite a
// retry at once).
func TestRetryAfterIsWholeSecondsRoundedUp(t *testing.T) {
	for _, tc := range []struct {
		delay *durationpb.Duration
		want  string
	}{
		{durationpb.New(1500 * time.Millisecond), "2"},
		{durationpb.New(2 * time.Second), "2"},
		{durationpb.New(59*time.Second + time.Nanosecond), "60"},
		{durationpb.New(200 * time.Millisecond), "1"},
		{durationpb.New(0), "1"},
	} {
		st, err := status.New(codes.ResourceExhausted, "later").WithDetails(&errdetails.RetryInfo{RetryDelay: tc.delay})
		if err != nil {
			t.Fatal(err)
		}
		w := answer(t, context.Background(), context.Background(), st.Err())
		if got := strings.Join(w.Header().Values("Retry-After"), ","); got != tc.want || w.Code != http.StatusTooManyRequests {
			t.Errorf("RetryInfo %v: HTTP %d, Retry-After %q; want 429, %q", tc.delay, w.Code, got, tc.want)
		}
	}
}

// TestCancelledIsUnavailableOnlyWhileStopping: a call cancelled because
// the gateway is stopping is 503 (retry); one the caller itself gave up,
// or that the server answered CANCELLED while the gateway runs, keeps
// grpc-gateway's 499.
func TestCancelledIsUnavailableOnlyWhileStopping(t *testing.T) {
	stopped, stop := context.WithCancel(context.Background())
	stop()
	cancelled := status.Error(codes.Canceled, "context canceled")
	for _, tc := range []struct {
		name             string
		mounted, request context.Context
		want             int
	}{
		{"gateway stopping", stopped, context.Background(), http.StatusServiceUnavailable},
		{"gateway running", context.Background(), context.Background(), 499},
		{"caller gone while stopping", stopped, stopped, 499},
	} {
		if w := answer(t, tc.mounted, tc.request, cancelled); w.Code != tc.want {
			t.Errorf("%s: HTTP %d %s; want %d", tc.name, w.Code, w.Body, tc.want)
		}
	}
}

// answer is errorStatus's answer to err for a request with context
// request, made while the gateway's context is mounted.
func answer(t *testing.T, mounted, request context.Context, err error) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(request, "POST", "/v1/accounts/acme/submit", nil)
	w := httptest.NewRecorder()
	errorStatus(mounted)(request, runtime.NewServeMux(), &runtime.JSONPb{}, w, req, err)
	return w
}

// TestSizeIsInMiBOnlyWhenWhole: the body limit a refusal names.
func TestSizeIsInMiBOnlyWhenWhole(t *testing.T) {
	for n, want := range map[int64]string{
		16 << 20:     "16 MiB",
		1 << 20:      "1 MiB",
		16<<20 - 1:   "16777215 bytes",
		16<<20 + 512: "16777728 bytes",
		512:          "512 bytes",
	} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
}
