//go:build linux

package cli

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// documentedMaxMessage is the gRPC message bound of docs/api.md (8 MiB);
// the HTTP gateway reads a body of up to twice it (16 MiB).
const documentedMaxMessage = 8 << 20

// TestServeHoldsGRPCMessagesToTheLimit: `automator serve` takes a gRPC
// message of exactly 8 MiB (it gets as far as the checks of the command,
// which find its stdin over max_stdin) and refuses one byte more itself,
// with ResourceExhausted "larger than max". The client here would send
// any size, so only serve's own bound is in question: without it gRPC's
// default of 4 MiB would refuse the first; with a larger one the second
// would be checked as a command.
func TestServeHoldsGRPCMessagesToTheLimit(t *testing.T) {
	t.Parallel()
	if config.MaxMessage != documentedMaxMessage {
		t.Fatalf("config.MaxMessage is %d, docs/api.md says 8 MiB", config.MaxMessage)
	}
	s := serveInProcess(t)
	s.account(t, "acme")
	cfg, _, err := clientConfig(s.dir, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(s.dir, config.FileCACert))
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ClientTLS(caPEM, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+s.grpc,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(cfg.APIKey, true)),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(4*documentedMaxMessage)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := automatorv1.NewAutomatorServiceClient(conn)

	// request is a submit of exactly size bytes.
	request := func(size int) *automatorv1.ExecuteRequest {
		r := &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh", Stdin: make([]byte, size)}}
		r.Command.Stdin = make([]byte, size-(proto.Size(r)-size))
		if n := proto.Size(r); n != size {
			t.Fatalf("made a request of %d bytes, want %d", n, size)
		}
		return r
	}
	_, err = c.Submit(t.Context(), request(documentedMaxMessage))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "command.stdin") {
		t.Fatalf("a message of exactly 8 MiB: %v; want it past the size check, InvalidArgument for its stdin over max_stdin", err)
	}
	_, err = c.Submit(t.Context(), request(documentedMaxMessage+1))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "received message larger than max") {
		t.Fatalf("a message of 8 MiB + 1 byte: %v; want ResourceExhausted from the automator, received message larger than max", err)
	}
	if _, err := c.Submit(t.Context(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh"}}); err != nil {
		t.Fatalf("a submit of ordinary size after them: %v", err)
	}
}

// TestServeHoldsHTTPBodiesToTheLimit: the HTTP gateway of `automator
// serve` runs a body of exactly the most the largest command within its
// limits takes as JSON (a small command padded with white space), under
// the 16 MiB of two gRPC messages, and refuses one byte more, 400, saying
// what the limit is: a review's API key made the automator hold 44 MB
// for each body of 15 MB it sent at once, refused only once decoded.
func TestServeHoldsHTTPBodiesToTheLimit(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	cfg, _, err := clientConfig(s.dir, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	limit := int(serverLimits(config.Limits{}).JSONBodyBound())
	if limit >= 2*documentedMaxMessage || limit < 4<<20 {
		t.Fatalf("the body limit of the default limits is %d bytes; want under 16 MiB, and room for max_stdin's 1 MiB escaped", limit)
	}
	submit := func(size int) (int, string) {
		t.Helper()
		object := `{"command": {"script": "x.sh"}}`
		body := object + strings.Repeat(" ", size-len(object))
		req, err := http.NewRequestWithContext(t.Context(), "POST", s.http+"/v1/accounts/acme/submit", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := submit(limit); code != http.StatusOK {
		t.Fatalf("a body of exactly the limit, %d bytes: HTTP %d %.300s, want 200", limit, code, body)
	}
	if code, body := submit(limit + 1); code != http.StatusBadRequest || !strings.Contains(body, "the most the largest command within the automator's limits takes as JSON") {
		t.Fatalf("a body of the limit + 1 byte: HTTP %d %.300s, want 400 saying what the limit is", code, body)
	}
	http.DefaultClient.CloseIdleConnections()
}
