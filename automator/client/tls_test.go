package client_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/closedport"
)

// tlsServer returns the address of a TLS server that is not an
// automator, its certificate for 127.0.0.1 signed by ca, configured
// further by configure: it makes the handshake, then reads until the
// client goes, answering nothing; or, when closes, closes the connection
// (a load balancer that ends TLS, without a backend).
func tlsServer(t *testing.T, ca pki.Bundle, closes bool, configure func(*tls.Config)) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{client.ServerCert(t, ca)}, NextProtos: []string{"h2"}}
	configure(cfg)
	return closedport.Accepting(t, func(conn net.Conn) {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(conn, cfg)
		if tc.Handshake() == nil && !closes {
			_, _ = io.Copy(io.Discard, tc)
		}
	})
}

// TestATLSServerThatRefusesTheClientIsToldAsTheTLSError: a TLS server
// that ends the handshake with an alert (it wants a client certificate;
// it speaks no HTTP/2), or whose certificate the client does not trust,
// is no automator answering: OnUnreachable is told once, not hung, the
// TLS error (KindTLS), with the address; one that closes the connection
// after its handshake (a load balancer ending TLS, without a backend), as
// closed without answering (KindClosed). Before, the TLS records it sent
// counted as an automator's answer: the alerts and the close were told
// nothing until RetryFor ended ("giving up"), and an untrusted address
// after a refused one was told as the refused one.
func TestATLSServerThatRefusesTheClientIsToldAsTheTLSError(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("another CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wantsCert := "https://" + tlsServer(t, ca, false, func(c *tls.Config) { c.ClientAuth = tls.RequireAnyClientCert })
	noH2 := "https://" + tlsServer(t, ca, false, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	untrusted := "https://" + tlsServer(t, other, false, func(*tls.Config) {})
	refused := "https://" + closedport.Addr(t)
	noBackend := "https://" + tlsServer(t, ca, true, func(*tls.Config) {})
	const id = "w_0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name string
		// addrs are the client's; the last is the one told.
		addrs []string
		says  string
		kind  client.UnreachableKind
	}{
		{"wants a client certificate", []string{wantsCert}, "certificate required", client.KindTLS},
		{"speaks no HTTP/2", []string{noH2}, "no application protocol", client.KindTLS},
		{"untrusted, after a refused one", []string{refused, untrusted}, "certificate signed by unknown authority", client.KindTLS},
		// TLS made, then the connection closed with nothing more.
		{"closed after its handshake", []string{noBackend}, "accepted the connection and closed it without answering", client.KindClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// What is told ends the call, which would go on trying
			// until RetryFor.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var told unreachables
			c, err := client.New(client.Config{Addresses: tc.addrs, APIKey: "oak_x", CAPEM: ca.CertPEM, ServerName: "127.0.0.1", RetryFor: 2 * time.Second,
				OnUnreachable: told.tellAndEnd(cancel)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Get(ctx, id); err == nil {
				t.Fatal("Get succeeded")
			}
			u := told.once(t, " before the call ended")
			url := tc.addrs[len(tc.addrs)-1]
			if u.Hung || u.Kind != tc.kind || u.Address != url || u.Err == nil || !strings.Contains(u.Err.Error(), tc.says) {
				t.Fatalf("OnUnreachable told %+v; want not hung, %v, the address %s, an error saying %q", u, tc.kind, url, tc.says)
			}
		})
	}
}
