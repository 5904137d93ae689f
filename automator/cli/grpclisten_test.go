//go:build linux

package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/opsgate/opsgate/internal/grpcwire/wiretest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestUnfinishedGRPCHandshakeIsCutOff: a connection to the gRPC listener
// that never starts its TLS handshake is closed once the handshake timeout
// passes, rather than holding a file descriptor and a goroutine for gRPC's
// own default of two minutes. Anyone who reaches the listener can open
// one, without a credential.
func TestUnfinishedGRPCHandshakeIsCutOff(t *testing.T) {
	saved := grpcHandshakeTimeout
	grpcHandshakeTimeout = 200 * time.Millisecond
	t.Cleanup(func() { grpcHandshakeTimeout = saved })
	s := serveInProcess(t)

	conn, err := net.Dial("tcp", s.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Not a timing assertion: only how long the test waits before it
	// says the connection was held.
	if err := conn.SetReadDeadline(time.Now().Add(waittest.Bound)); err != nil {
		t.Fatal(err)
	}
	n, err := conn.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("reading a connection that never started its handshake: %d bytes, %v; want it closed by the automator", n, err)
	}
}

// TestOversizedMetadataIsRefusedAndOthersServed: a request whose metadata
// (its HTTP/2 header list) is past the limit is not served: its stream is
// reset, or its connection closed once it sends more, before any
// credential is looked at, so a client without one cannot make the
// automator decode and hold 16 MiB (gRPC's own default) per request. The
// listener goes on serving: a request of ordinary size is answered.
func TestOversizedMetadataIsRefusedAndOthersServed(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	request := []string{":method", "POST", ":scheme", "https", ":path", automatorv1.ProxyService_Poll_FullMethodName,
		":authority", "localhost", "content-type", "application/grpc", "te", "trailers"}
	// Many fields of 16 KiB, 2 MiB in all: past the limit however they are
	// counted, each far below it.
	big := append([]string(nil), request...)
	for i := range 128 {
		big = append(big, fmt.Sprintf("x-pad-%d", i), strings.Repeat("p", 16<<10))
	}
	fr := dialH2(t, s)
	writeHeaderBlock(t, fr, 1, wiretest.Headers(big...))
	if got := outcome(t, fr, 1); got == "answered" {
		t.Fatal("the request with 2 MiB of metadata was served; want it refused")
	}

	fr = dialH2(t, s)
	writeHeaderBlock(t, fr, 1, wiretest.Headers(request...))
	if got := outcome(t, fr, 1); got != "answered" {
		t.Fatalf("a request of ordinary size on a new connection: %s; want it answered\n%s", got, s.log)
	}
}

// dialH2 opens a TLS connection to the automator's gRPC listener, trusting
// its CA, and starts HTTP/2 on it.
func dialH2(t *testing.T, s *served) *http2.Framer {
	t.Helper()
	cfg := s.tlsConfig(t)
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", s.grpc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// Not a timing assertion: only how long the test waits for an answer.
	if err := conn.SetDeadline(time.Now().Add(waittest.Bound)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr
}

// outcome reads frames until stream id is answered (its response headers),
// reset, or its connection closed, and says which.
func outcome(t *testing.T, fr *http2.Framer, id uint32) string {
	t.Helper()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("no answer on stream %d: %v", id, err)
			}
			return "closed"
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return "closed"
				}
			}
		case *http2.HeadersFrame:
			if f.StreamID == id {
				return "answered"
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "reset"
			}
		case *http2.GoAwayFrame:
			return "closed"
		}
	}
}

// writeHeaderBlock sends a request's header block on stream id, in as
// many frames as it takes, and ends the stream with an empty message.
func writeHeaderBlock(t *testing.T, fr *http2.Framer, id uint32, block []byte) {
	t.Helper()
	const frame = 16 << 10 // HTTP/2's default largest frame
	first := block[:min(frame, len(block))]
	rest := block[len(first):]
	// A write fails once the automator has closed the connection, which
	// it may do while the block is being sent: the answer says so.
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(rest) == 0}); err != nil {
		return
	}
	for len(rest) > 0 {
		n := min(frame, len(rest))
		if err := fr.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return
		}
		rest = rest[n:]
	}
	_ = fr.WriteData(id, true, make([]byte, 5))
}
