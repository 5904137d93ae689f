package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/gateway"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestCallWhileStoppingIsUnavailable: serve stops the gateway (ends the
// context it was mounted with) before its HTTP listener closes. A call in
// between is told 503 UNAVAILABLE, "retry", as a gRPC caller of a stopping
// automator is, not 499 CANCELLED ("the client closed the request"),
// which a caller does not retry though it cancelled nothing.
func TestCallWhileStoppingIsUnavailable(t *testing.T) {
	gs := grpc.NewServer()
	t.Cleanup(gs.Stop)
	ctx, stop := context.WithCancel(context.Background())
	mux := http.NewServeMux()
	accept := func(context.Context, []string, string, string) error { return nil }
	if err := gateway.Mount(ctx, mux, gs, gateway.Options{Authenticate: accept}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	stop() // as serve does when it begins to stop

	call := func() (int, map[string]any) {
		resp, err := http.Post(hs.URL+"/v1/accounts/acme/submit", "application/json", strings.NewReader(`{"command": {"script": "x"}}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("HTTP %d %s: not JSON", resp.StatusCode, raw)
		}
		return resp.StatusCode, body
	}
	// The gateway's connection closes just after the context ends; until
	// then a call still reaches the gRPC server, which has no service here.
	var code int
	var body map[string]any
	waittest.Until(t, "the gateway's connection to close", func() bool {
		code, body = call()
		return code != http.StatusNotImplemented
	})
	if code != http.StatusServiceUnavailable || body["code"] != float64(14) || body["message"] != "automator shutting down; retry" {
		t.Fatalf("a call once the gateway is stopping: HTTP %d %v; want 503, code 14, \"automator shutting down; retry\"", code, body)
	}
}
