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
	conn, watched, w := refusedAfterHandshake(t)
	_, err := conn.Read(make([]byte, 64))
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Skipf("the read after the reset: %v; this kernel dropped the alert", err)
	}
	watched.Close()
	assertCertificateRequired(t, w)
}

// TestATLSAlertNotYetReadWhenAFailedWriteClosesTheConnectionIsTold: gRPC
// closes a connection once a write of its setup fails, and its reader
// may not have come to the alert before the reset by then (a clean-clone
// run, loaded, failed so). The close reads it first: the TLS error is
// told. Before, nothing was, and a call gave up after RetryFor with
// OnUnreachable never told.
func TestATLSAlertNotYetReadWhenAFailedWriteClosesTheConnectionIsTold(t *testing.T) {
	t.Parallel()
	conn, _, w := refusedAfterHandshake(t)
	conn.Close()
	assertCertificateRequired(t, w)
}

// refusedAfterHandshake is a client's connection, watched, to a server
// that refused it with an alert after TLS 1.3's handshake (it wants a
// client certificate) and reset it, once a write of the client's failed,
// nothing read over it yet; and the watch of its address.
func refusedAfterHandshake(t *testing.T) (*tlsWatched, *watchedConn, *addrWatch) {
	t.Helper()
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
	t.Cleanup(func() { watched.Close() })
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	tc := tls.Client(watched, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("client handshake: %v (TLS 1.3 ends it before the server checks)", err)
	}
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
	return &tlsWatched{Conn: tc, raw: watched}, watched, w
}

// assertCertificateRequired fails t unless w's trouble is the TLS error
// of a client certificate required.
func assertCertificateRequired(t *testing.T, w *addrWatch) {
	t.Helper()
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
