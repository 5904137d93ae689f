package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/pki"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/config"
)

// TestDialTrustsOnlyTheProfilesCAAndPins: the proxy reaches an automator
// whose certificate its profile's CA signed (and whose chain holds a
// pinned key, when pins are set); another CA's certificate, or a chain
// without a pinned key, is refused before any token is sent.
func TestDialTrustsOnlyTheProfilesCAAndPins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := pki.NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pki.NewServer(ca, pki.ServerHosts("127.0.0.1"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	os.WriteFile(certFile, srv.CertPEM, 0o600)
	os.WriteFile(keyFile, srv.KeyPEM, 0o600)
	tlsCfg, err := pki.ServerTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	// A gRPC server with no service: a call that gets through TLS is
	// answered Unimplemented.
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)

	caPin, _ := pki.PinOfPEM(ca.CertPEM)
	leafPin, _ := pki.PinOfPEM(srv.CertPEM)
	other, _ := pki.NewCA("another CA", time.Now())
	wrong := strings.Repeat("00", 32)
	for _, c := range []struct {
		name string
		ca   []byte
		pins []string
		ok   bool
	}{
		{"the profile's CA", ca.CertPEM, nil, true},
		{"the CA and its pin", ca.CertPEM, []string{caPin.String()}, true},
		{"the CA and a wrong pin", ca.CertPEM, []string{wrong}, false},
		{"another CA", other.CertPEM, nil, false},
		{"the server's pin alone", nil, []string{leafPin.String()}, true},
		{"a wrong pin alone", nil, []string{wrong}, false},
	} {
		cfg := config.Config{AutomatorURL: "https://" + lis.Addr().String(), Token: "opt_x", CACert: string(c.ca), PinSHA256: c.pins}
		conn, err := Dial(cfg)
		if err != nil {
			t.Fatalf("%s: Dial: %v", c.name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = automatorv1.NewProxyServiceClient(conn).Poll(ctx, &automatorv1.PollRequest{InstanceId: "a"})
		cancel()
		conn.Close()
		got := status.Code(err)
		if c.ok && got != codes.Unimplemented {
			t.Errorf("%s: %v, want the call through TLS (Unimplemented)", c.name, err)
		}
		if !c.ok && got != codes.Unavailable {
			t.Errorf("%s: %v, want the TLS handshake refused (Unavailable)", c.name, err)
		}
	}
}
