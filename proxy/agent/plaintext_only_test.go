package agent_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestOnlyAnHTTPURLWhosePrefaceNeverCameIsSaidToBePlaintextClosed: the
// line saying the automator closed the plaintext connection (give
// https://) is for an http:// URL whose connection closed before the
// automator's HTTP/2 settings came. An http:// URL nothing listens at, and
// an https:// URL whose TLS connection closed so, are unreachable, and
// not told to give https://.
func TestOnlyAnHTTPURLWhosePrefaceNeverCameIsSaidToBePlaintextClosed(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	const plaintextLine = "closed the plaintext connection"
	t.Run("http nothing listens at", func(t *testing.T) {
		t.Parallel()
		httpNothingListens(t, a, plaintextLine)
	})
	t.Run("https closed after the handshake", func(t *testing.T) {
		t.Parallel()
		httpsClosedAfterHandshake(t, a, plaintextLine)
	})
}

func httpNothingListens(t *testing.T, a *automatortest.Automator, plaintextLine string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nothing := l.Addr().String()
	l.Close()
	conn, err := grpc.NewClient(nothing, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(a.Token, false)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	log := runLoggedAgent(t, a, conn, "http://"+nothing)
	waittest.Until(t, "the line saying the automator is unreachable at an http:// URL nothing listens at", func() bool {
		return strings.Contains(log.String(), "automator unreachable")
	})
	if strings.Contains(log.String(), plaintextLine) {
		t.Errorf("an http:// URL nothing listens at is said to be a plaintext connection closed:\n%s", log)
	}

}

func httpsClosedAfterHandshake(t *testing.T, a *automatortest.Automator, plaintextLine string) {
	// A TLS front that closes each connection once its handshake is done.
	web := httptest.NewTLSServer(http.NotFoundHandler()) // for its certificate
	defer web.Close()
	frontCfg := web.TLS.Clone()
	frontCfg.NextProtos = []string{"h2"}
	front, err := tls.Listen("tcp", "127.0.0.1:0", frontCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { front.Close() })
	go func() {
		for {
			c, err := front.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				_ = tc.CloseWrite()
				_, _ = io.Copy(io.Discard, tc) // until the client closes
			}()
		}
	}()
	roots := x509.NewCertPool()
	roots.AddCert(web.Certificate())
	addr := front.Addr().String()
	tlsConn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(a.Token, true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tlsConn.Close() })
	tlsLog := runLoggedAgent(t, a, tlsConn, "https://"+addr)
	waittest.Until(t, "the line saying the automator is unreachable at an https:// URL closed after the handshake", func() bool {
		return strings.Contains(tlsLog.String(), "automator unreachable")
	})
	if line := tlsLog.String(); strings.Contains(line, plaintextLine) || !strings.Contains(line, "error reading server preface") {
		t.Errorf("an https:// URL whose TLS connection closed before the automator's settings: want it unreachable, with gRPC's words, and not said to be a plaintext connection closed:\n%s", line)
	}
}
