package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve accepts TLS connections with cfg on 127.0.0.1 until the test ends,
// completing each handshake, and returns the address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	})
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	return lis.Addr().String()
}

// dial completes a handshake and returns its state.
func dial(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	return c.ConnectionState(), nil
}

// pair makes a CA and a server certificate for 127.0.0.1 written to dir.
func pair(t *testing.T, dir string) (ca Bundle, certFile, keyFile string) {
	t.Helper()
	ca, err := NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	writeServer(t, ca, certFile, keyFile)
	return ca, certFile, keyFile
}

// writeServer writes a new server certificate signed by ca the way a
// renewal does: new files renamed into place.
func writeServer(t *testing.T, ca Bundle, certFile, keyFile string) Bundle {
	t.Helper()
	b, err := NewServer(ca, ServerHosts("127.0.0.1"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string][]byte{keyFile: b.KeyPEM, certFile: b.CertPEM} {
		if err := os.WriteFile(path+".new", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func leafOf(t *testing.T, b Bundle) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b.CertPEM)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServerPrefersTLS13AndRefusesBelow12: a client that speaks TLS 1.3
// gets it; TLS 1.2 works with forward-secret AEAD suites only; older
// versions and weaker suites are refused.
func TestServerPrefersTLS13AndRefusesBelow12(t *testing.T) {
	ca, certFile, keyFile := pair(t, t.TempDir())
	cfg, err := ServerTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	client, err := ClientTLS(ca.CertPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := dial(addr, client); err != nil || cs.Version != tls.VersionTLS13 {
		t.Fatalf("default client: version %x, %v; want TLS 1.3", cs.Version, err)
	}
	tls12 := client.Clone()
	tls12.MaxVersion = tls.VersionTLS12
	if cs, err := dial(addr, tls12); err != nil || cs.Version != tls.VersionTLS12 {
		t.Fatalf("TLS 1.2 client: version %x, %v; want TLS 1.2", cs.Version, err)
	}
	old := client.Clone()
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := dial(addr, old); err == nil {
		t.Errorf("a TLS 1.1 client completed a handshake")
	}
	cbc := tls12.Clone()
	cbc.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}
	if _, err := dial(addr, cbc); err == nil {
		t.Errorf("a TLS 1.2 client offering only CBC suites completed a handshake")
	}
}

// TestRenewedCertificateIsServedWithoutRestart: new server.pem and
// server.key renamed into place are served from the next look on; a pair
// that does not load leaves the current certificate in service and is
// reported once, unless the next look finds it mended (a look between a
// renewal's two renames).
func TestRenewedCertificateIsServedWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	ca, certFile, keyFile := pair(t, dir)
	r, err := NewCertReloader(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	// Looks happen when the test says (the handshakes run on the server's
	// goroutine: hence the lock).
	var mu sync.Mutex
	now := time.Now()
	r.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func() { mu.Lock(); defer mu.Unlock(); now = now.Add(DefaultReloadEvery) }
	var reloads []error
	r.OnReload = func(err error) { mu.Lock(); defer mu.Unlock(); reloads = append(reloads, err) }
	addr := serve(t, ServerTLSFrom(r))
	client, _ := ClientTLS(ca.CertPEM, "127.0.0.1")
	serial := func() string {
		t.Helper()
		cs, err := dial(addr, client)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		return cs.PeerCertificates[0].SerialNumber.String()
	}
	first := serial()

	renewed := writeServer(t, ca, certFile, keyFile)
	if got := serial(); got != first {
		t.Fatalf("certificate changed before the reloader looked (%s)", got)
	}
	advance()
	// A look made for Certificate, with no handshake: what /metrics and
	// the log say of the certificate in service.
	if leaf, err := x509.ParseCertificate(r.Certificate().Certificate[0]); err != nil {
		t.Fatal(err)
	} else if got, want := leaf.SerialNumber.String(), leafOf(t, renewed).SerialNumber.String(); got != want {
		t.Fatalf("Certificate after a renewal and a look: %s, want the renewed %s", got, want)
	}
	if got, want := serial(), leafOf(t, renewed).SerialNumber.String(); got != want {
		t.Fatalf("after a renewal and a look: serving %s, want the renewed %s", got, want)
	}

	// A look between a renewal's two renames (the key is new, the
	// certificate not yet) keeps the current pair and reports nothing:
	// the next look finds the whole renewal.
	half, _ := NewServer(ca, ServerHosts("127.0.0.1"), time.Now())
	if err := os.WriteFile(keyFile, half.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	advance()
	if got := serial(); got != leafOf(t, renewed).SerialNumber.String() {
		t.Fatalf("a half-renewed pair was put in service (%s)", got)
	}
	// A second look a moment later (serve's own, beside a handshake's)
	// finds the same half pair: not reported either.
	r.Look()
	if err := os.WriteFile(certFile, half.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	advance()
	if got, want := serial(), leafOf(t, half).SerialNumber.String(); got != want {
		t.Fatalf("after the renewal's second rename: serving %s, want %s", got, want)
	}
	renewed = half

	// A certificate whose key does not match: kept out of service.
	other, _ := NewServer(ca, ServerHosts("127.0.0.1"), time.Now())
	if err := os.WriteFile(certFile, other.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	advance()
	if got := serial(); got != leafOf(t, renewed).SerialNumber.String() {
		t.Fatalf("a mismatched pair was put in service (%s)", got)
	}
	advance()
	serial()
	// Look looks whenever the last look was (the serve's own ticker of
	// the reloader's period, which a throttled look would skip every
	// other tick).
	looked, _ := NewServer(ca, ServerHosts("127.0.0.1"), time.Now())
	if err := os.WriteFile(keyFile, looked.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, looked.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if leaf, err := x509.ParseCertificate(r.Look().Certificate[0]); err != nil {
		t.Fatal(err)
	} else if got, want := leaf.SerialNumber.String(), leafOf(t, looked).SerialNumber.String(); got != want {
		t.Fatalf("Look with no time passed since the last look: %s, want the renewed %s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reloads) != 4 || reloads[0] != nil || reloads[1] != nil || reloads[2] == nil || !strings.Contains(reloads[2].Error(), "keeping the current one") || reloads[3] != nil {
		t.Fatalf("OnReload calls: %v; want two successes, one error for the mismatched pair, then a success", reloads)
	}
}

// TestPinnedClientTrustsOnlyPinnedKeys: with pins, the chain must also
// hold a pinned key; with pins and no CA, the server's key must be pinned.
func TestPinnedClientTrustsOnlyPinnedKeys(t *testing.T) {
	ca, certFile, keyFile := pair(t, t.TempDir())
	cfg, _ := ServerTLS(certFile, keyFile)
	addr := serve(t, cfg)
	caPin, err := PinOfPEM(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	serverPEM, _ := os.ReadFile(certFile)
	leafPin, _ := PinOfPEM(serverPEM)
	var wrong Pin
	wrong[0] = 1
	otherCA, _ := NewCA("another CA", time.Now())

	for _, c := range []struct {
		name string
		ca   []byte
		pins []Pin
		ok   bool
	}{
		{"CA only", ca.CertPEM, nil, true},
		{"CA and its pin", ca.CertPEM, []Pin{wrong, caPin}, true},
		{"CA and the server's pin", ca.CertPEM, []Pin{leafPin}, true},
		{"CA and a wrong pin", ca.CertPEM, []Pin{wrong}, false},
		{"another CA", otherCA.CertPEM, nil, false},
		{"another CA and the right pin", otherCA.CertPEM, []Pin{leafPin}, false},
		{"the server's pin only", nil, []Pin{leafPin}, true},
		{"the CA's pin only (the server's key signs)", nil, []Pin{caPin}, false},
		{"a wrong pin only", nil, []Pin{wrong}, false},
	} {
		client, err := ClientTLSPinned(c.ca, c.pins, "127.0.0.1")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if _, err := dial(addr, client); (err == nil) != c.ok {
			t.Errorf("%s: handshake error %v, want ok=%v", c.name, err, c.ok)
		}
	}
	if _, err := ClientTLSPinned(nil, nil, "x"); err == nil {
		t.Errorf("ClientTLSPinned with nothing to trust succeeded")
	}
}

func TestParsePin(t *testing.T) {
	var p Pin
	for i := range p {
		p[i] = byte(i)
	}
	for _, s := range []string{p.String(), strings.ToUpper(p.String()), "sha256:" + p.String(), colons(p.String())} {
		if got, err := ParsePin(s); err != nil || got != p {
			t.Errorf("ParsePin(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "abc", p.String() + "00", strings.Repeat("zz", 32)} {
		if _, err := ParsePin(s); err == nil {
			t.Errorf("ParsePin(%q) succeeded", s)
		}
	}
}

func colons(h string) string {
	var parts []string
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, ":")
}

func FuzzParsePin(f *testing.F) {
	f.Add("sha256:" + strings.Repeat("ab", 32))
	f.Add(strings.Repeat("0", 64))
	f.Add("::::")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePin(s)
		if err != nil {
			return
		}
		if again, err := ParsePin(p.String()); err != nil || again != p {
			t.Fatalf("ParsePin(String()) = %v, %v", again, errors.Join(err))
		}
	})
}

// TestServerCertificateEndsNoLaterThanItsCA: a certificate made in the
// CA's last two years ends with the CA, not two years on; one made after
// the CA ended is refused, naming the end.
func TestServerCertificateEndsNoLaterThanItsCA(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ca, err := NewCA("test CA", t0)
	if err != nil {
		t.Fatal(err)
	}
	caEnd := t0.Add(caValidity)
	if b, err := NewServer(ca, ServerHosts("127.0.0.1"), t0); err != nil || !leafOf(t, b).NotAfter.Equal(t0.Add(ServerValidity)) {
		t.Fatalf("made at the CA's start: %v; want it to end %v", err, t0.Add(ServerValidity))
	}
	late := caEnd.Add(-ServerValidity / 2)
	b, err := NewServer(ca, ServerHosts("127.0.0.1"), late)
	if err != nil {
		t.Fatal(err)
	}
	if end := leafOf(t, b).NotAfter; !end.Equal(caEnd) {
		t.Errorf("made a year before the CA ends: it ends %v, want the CA's end %v", end, caEnd)
	}
	if _, err := NewServer(ca, ServerHosts("127.0.0.1"), caEnd.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "the CA ended on "+caEnd.Format(time.RFC3339)) {
		t.Errorf("made after the CA ended: %v; want an error naming its end", err)
	}
}
