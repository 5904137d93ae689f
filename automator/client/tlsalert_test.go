package client

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/pki"
)

// TestATLSAlertAfterAFailedWriteIsToldAsTheTLSError: a server that wants
// a client certificate sends its alert once TLS 1.3's handshake is over
// on the client's side, and closes; what the client wrote meanwhile, left
// unread, makes that close a reset, so a write of the client's can fail
// before its read comes to the alert. The alert is still what refused the
// client: told as the TLS error (KindTLS, "certificate required"), not
// as a connection closed unanswered. Before, the failed write decided.
func TestATLSAlertAfterAFailedWriteIsToldAsTheTLSError(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert := serverCert(t, ca)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			closed <- err
			return
		}
		tc := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert})
		err = tc.Handshake()
		_ = conn.(*net.TCPConn).SetLinger(0) // a reset, as unread data makes one
		conn.Close()
		closed <- err
	}()

	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	w := &addrWatch{}
	watched := watch(raw, w, false)
	defer watched.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	tc := tls.Client(watched, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("client handshake: %v (TLS 1.3 ends it before the server checks)", err)
	}
	conn := &tlsWatched{Conn: tc, raw: watched}
	if err := <-closed; err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("server handshake: %v; want it refused for the missing client certificate", err)
	}
	// The reset is here once a write fails.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := watched.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes after the server's reset still succeed")
		}
		time.Sleep(time.Millisecond)
	}
	_, err = conn.Read(make([]byte, 64))
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Skipf("the read after the reset: %v; this kernel dropped the alert", err)
	}
	watched.Close()
	tr := w.trouble.Load()
	if tr == nil || tr.kind != KindTLS || !strings.Contains(tr.err.Error(), "certificate required") {
		t.Fatalf("trouble = %+v; want the TLS error, saying certificate required", tr)
	}
}

// serverCert is a certificate for 127.0.0.1 signed by ca, for a TLS
// server of a test's.
func serverCert(t *testing.T, ca pki.Bundle) tls.Certificate {
	t.Helper()
	b, err := pki.NewServer(ca, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
