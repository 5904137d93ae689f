package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// FuzzExecuteRequestJSON feeds arbitrary bodies of POST
// /v1/accounts/{account}/submit through the gateway's JSON decoding
// (protojson, unknown fields refused) and the server's validation of the
// command and idempotency key. Never a panic; what is accepted respects
// every limit and survives the trip to the proxy (proto encoding) intact.
func FuzzExecuteRequestJSON(f *testing.F) {
	for _, seed := range []string{
		`{"command": {"script": "hello.sh", "args": ["world"]}, "timeout": "60s"}`,
		`{"command": {"script": "checksum.sh", "stdin": "c29tZSBkYXRhCg==", "env": {"GREETING": "hi"}}, "idempotency_key": "deploy-1"}`,
		`{"command": {"script": ""}}`,
		`{"command": {"script": "x", "args": ["\u0000", "é"]}, "idempotency_key": "has space"}`,
		`{"command": {"script": "x"}, "unknown": 1}`,
		`{"command": null, "timeout": "-1s"}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	s := &Server{}
	s.limits.MaxArgs = 4 // small limits, so the fuzzer reaches them
	s.limits.MaxArgsBytes = 64
	s.limits.MaxEnv = 2
	s.limits.MaxEnvBytes = 32
	s.limits.MaxStdin = 64
	s.limits.applyDefaults()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req automatorv1.ExecuteRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			return
		}
		if s.checkCommand(req.GetCommand()) != nil || checkIdempotencyKey(req.GetIdempotencyKey()) != nil {
			return
		}
		c := req.GetCommand()
		if c.GetScript() == "" || len(c.GetScript()) > s.limits.MaxScriptName || len(c.GetArgs()) > s.limits.MaxArgs ||
			len(c.GetEnv()) > s.limits.MaxEnv || len(c.GetStdin()) > s.limits.MaxStdin {
			t.Fatalf("accepted a command over a limit: %v", c)
		}
		plain, err := proto.Marshal(c)
		if err != nil {
			t.Fatalf("an accepted command does not encode: %v", err)
		}
		var back automatorv1.Command
		if err := proto.Unmarshal(plain, &back); err != nil || !proto.Equal(&back, c) {
			t.Fatalf("an accepted command does not survive encoding: %v", err)
		}
	})
}

// FuzzAuthMetadata feeds arbitrary authorization and x-forwarded-for
// values to the parsing every call goes through before its credential is
// looked up: never a panic, a secret only from a well-formed header, and a
// source that is bounded and never taken from a network caller's own
// x-forwarded-for.
func FuzzAuthMetadata(f *testing.F) {
	f.Add("Bearer opt_abc", "203.0.113.7", true)
	f.Add("Bearer ", "", false)
	f.Add("bearer x", "1.2.3.4, 5.6.7.8", true)
	f.Add("BEARER x", "", false)
	f.Add("Bearer  x", "", false)
	f.Add("Bearerx", "", false)
	f.Add("Bearer a b", strings.Repeat("9", 200), true)
	f.Add("", ",,,", true)
	f.Fuzz(func(t *testing.T, auth, fwd string, viaGateway bool) {
		if !utf8.ValidString(auth) || !utf8.ValidString(fwd) {
			return // gRPC metadata values are valid strings on the wire
		}
		md := metadata.Pairs("authorization", auth, "x-forwarded-for", fwd)
		var addr net.Addr = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4242}
		if viaGateway {
			addr = pipeAddr{}
		}
		ctx := peer.NewContext(metadata.NewIncomingContext(context.Background(), md), &peer.Peer{Addr: addr})
		secret, err := bearer(ctx)
		// The scheme in any case (RFC 9110 11.1), one space, a secret
		// taken as it is.
		want, ok := "", len(auth) > len("Bearer ")
		for i := 0; ok && i < len("Bearer "); i++ {
			c := auth[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			ok = c == "bearer "[i]
		}
		if ok {
			want = auth[len("Bearer "):]
		}
		if (err == nil) != ok || secret != want {
			t.Fatalf("bearer(%q) = %q, %v; want %q (accepted: %v)", auth, secret, err, want, ok)
		}
		src := sourceOf(ctx)
		if len(src) > 64 {
			t.Fatalf("source %q is longer than 64 bytes", src)
		}
		if !viaGateway && src != "192.0.2.1" {
			t.Fatalf("a network caller's source is %q, taken from its own x-forwarded-for %q", src, fwd)
		}
		_ = limitKey(src)
	})
}

// pipeAddr is the address of the gateway's in-memory connections.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "http-gateway" }
