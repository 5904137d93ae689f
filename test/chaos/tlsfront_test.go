//go:build linux

package chaos

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestATLSFrontServesAPlaintextAutomatorByName: the chaos run's instance
// that reaches the automator through the CONNECT proxy does so by a name
// that is not loopback, over TLS ended by a TLSFront in front of the
// plaintext automator (a proxy refuses http:// to such a name). Here
// through the front alone, with no other fault: units succeed, and the
// tunnel is the CONNECT proxy's.
func TestATLSFrontServesAPlaintextAutomatorByName(t *testing.T) {
	dir := t.TempDir()
	s := &small{dir: dir, auto: newAutomator(t, dir, "127.0.0.1", true)}
	if err := s.auto.Serve(); err != nil {
		t.Fatal(err)
	}
	s.profile = s.auto.CreateAccount("acme")
	s.scripts = writeScripts(t, dir)
	s.execLog = filepath.Join(dir, "exec.log")
	s.client = automatorv1.NewAutomatorServiceClient(s.auto.Dial())
	const name = "automator.chaos.test"
	host := fmt.Sprintf("%s:%d", name, s.auto.Port)
	connect, err := NewConnectProxy(map[string]string{host: NewTLSFront(t, s.auto.DataDir, name, s.auto.Addr()).Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(connect.Close)
	in := newInstance(t, dir, "behind", s.profile, "https://"+host, s.scripts, 4,
		map[string]string{"HTTPS_PROXY": "http://" + connect.Addr()})
	if err := in.StartPolling(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	var ids, wants []string
	for i := range 3 {
		id, want := s.submit(t, fmt.Sprintf("tls-%d", i), time.Minute)
		ids, wants = append(ids, id), append(wants, want)
	}
	s.mustSucceed(t, ids, wants, time.Minute)
	if n := connect.Connects(host); n < 1 {
		t.Errorf("the units ran, but through %d tunnels of the CONNECT proxy", n)
	}
}

// TLSFront ends TLS in front of a plaintext automator (or its relay), as
// the automator's own listener would, with a certificate for a name of the
// test's choosing signed by the automator's CA: an instance that reaches
// the automator by a name that is not loopback (through the CONNECT proxy)
// must use https://, since a proxy refuses http:// to such a host, while
// the chaos automators serve plaintext on loopback. Each connection is
// relayed to backend; when either side ends, both are reset.
type TLSFront struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewTLSFront listens on a free loopback port and serves host's
// certificate, signed by the CA of the automator data directory dataDir.
func NewTLSFront(t *testing.T, dataDir, host, backend string) *TLSFront {
	t.Helper()
	var ca pki.Bundle
	var err error
	if ca.CertPEM, err = os.ReadFile(filepath.Join(dataDir, config.FileCACert)); err != nil {
		t.Fatal(err)
	}
	if ca.KeyPEM, err = os.ReadFile(filepath.Join(dataDir, config.FileCAKey)); err != nil {
		t.Fatal(err)
	}
	b, err := pki.NewServer(ca, []string{host}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &TLSFront{
		ln:      tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}),
		backend: backend,
		conns:   map[net.Conn]struct{}{},
	}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.Close)
	return f
}

// Addr is where it listens, host:port.
func (f *TLSFront) Addr() string { return f.ln.Addr().String() }

// Close stops listening, resets every connection and waits for its
// goroutines.
func (f *TLSFront) Close() {
	f.mu.Lock()
	f.closed = true
	conns := make([]net.Conn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	_ = f.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	f.wg.Wait()
}

func (f *TLSFront) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			_ = c.Close()
			continue
		}
		f.wg.Add(1)
		go f.handle(c)
	}
}

func (f *TLSFront) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *TLSFront) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

func (f *TLSFront) handle(client net.Conn) {
	defer f.wg.Done()
	defer f.untrack(client)
	defer client.Close()
	server, err := net.DialTimeout("tcp", f.backend, 5*time.Second)
	if err != nil {
		return
	}
	if !f.track(server) {
		reset(server)
		return
	}
	defer f.untrack(server)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); reset(server); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); _ = client.Close(); done <- struct{}{} }()
	<-done
	<-done
}
