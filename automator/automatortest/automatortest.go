// Package automatortest starts a real automator inside a test process, for
// the tests of its callers (the Go client, the HTTP/JSON gateway, the CLI,
// the documented examples): a SQLite store in t.TempDir(), both gRPC
// services over TLS on 127.0.0.1:0 behind the production authentication
// interceptor, the HTTP/JSON gateway on its own 127.0.0.1:0 listener, one
// account and one API key. StartProxy adds real proxy instances: the agent
// with the real script runner, polling over TLS with the account token.
//
// Everything stops in t.Cleanup.
package automatortest

import (
	"context"
	"crypto/tls"
	"database/sql"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/opsgate/opsgate/automator/gateway"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/lastread"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// maxMessage is the automator's message bound (as in `automator serve`).
const maxMessage = 8 << 20

// Options shorten or adjust the automator for a test.
type Options struct {
	// PollWindow is the longest a poll waits (2 s here; 30 s in production).
	PollWindow time.Duration
	// IdempotencyRetention is passed to the server (24 h when zero).
	IdempotencyRetention time.Duration
	// Plaintext serves gRPC without TLS (on loopback, as --insecure-plaintext).
	Plaintext bool
	// Interceptors run on every gRPC call after authentication, so a test
	// can watch or disturb calls (for example drop an answer).
	Interceptors []grpc.UnaryServerInterceptor
	// Log receives the automator's log (discarded when nil).
	Log io.Writer
	// Clock is the automator's clock (the real one when nil), so a test
	// can set it apart from its callers'.
	Clock server.Clock
	// Limits are the server's (its defaults when zero).
	Limits server.Limits
	// WrapStore, when set, wraps the store the server is given, so a
	// test can watch or hold its calls (Automator.Store stays the bare
	// one).
	WrapStore func(store.Store) store.Store
}

// Automator is a running automator.
type Automator struct {
	Store  store.Store
	Server *server.Server
	// GRPCAddr is the gRPC listener, 127.0.0.1:PORT.
	GRPCAddr string
	// HTTPURL is the HTTP listener with the JSON API, http://127.0.0.1:PORT.
	HTTPURL   string
	Plaintext bool
	// CAPEM is the CA certificate, also written to CAFile.
	CAPEM  []byte
	CAFile string
	// APIKey authenticates callers; APIKeyFile holds it.
	APIKey     string
	APIKeyFile string
	// Account is the account made at start ("acme"), with its proxy token
	// and key.
	Account string
	Token   string
	Key     crypto.Key

	dbPath string
}

// Start runs an automator until the end of the test.
func Start(t testing.TB, o Options) *Automator {
	t.Helper()
	if o.PollWindow == 0 {
		o.PollWindow = 2 * time.Second
	}
	logW := o.Log
	if logW == nil {
		logW = io.Discard
	}
	ctx := context.Background()
	dir := t.TempDir()
	a := &Automator{Account: "acme", Plaintext: o.Plaintext, dbPath: filepath.Join(dir, "automator.db")}
	raw, err := sqlitestore.Open(ctx, a.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	// Like `automator serve`: credentials cached (the CLI's openStore).
	st := store.CachedCredentials(raw, store.CredentialTTL)
	a.Store = st
	master, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}

	a.Token, a.Key = createAccount(t, st, master, a.Account)
	if a.APIKey, err = crypto.NewToken("oak_"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: "admin", Hash: crypto.HashToken(a.APIKey), Name: "test", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	a.APIKeyFile = filepath.Join(dir, "admin.apikey")
	writeFile(t, a.APIKeyFile, []byte(a.APIKey+"\n"))

	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// As serve's: which connections were heard from lately.
	lis := lastread.Wrap(grpcLis, nil)
	var given store.Store = st
	if o.WrapStore != nil {
		given = o.WrapStore(st)
	}
	srv, err := server.New(server.Options{
		Store:                given,
		MasterKey:            master,
		PollWindow:           o.PollWindow,
		IdempotencyRetention: o.IdempotencyRetention,
		Clock:                o.Clock,
		Limits:               o.Limits,
		Silence:              lis.Silence,
		Logger:               slog.New(slog.NewTextHandler(logW, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Server = srv

	ca, err := pki.NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a.CAPEM = ca.CertPEM
	a.CAFile = filepath.Join(dir, "ca.pem")
	writeFile(t, a.CAFile, ca.CertPEM)
	creds := insecure.NewCredentials()
	if !o.Plaintext {
		cert, err := pki.NewServer(ca, pki.ServerHosts("127.0.0.1"), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		creds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	}
	gs := grpc.NewServer(append(grpcwire.ServerOptions(),
		grpc.Creds(creds),
		grpc.InTapHandle(srv.TapHandle()),
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{srv.UnaryInterceptor()}, o.Interceptors...)...),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxSendMsgSize(maxMessage),
		// As `automator serve`: clients and proxies may ping every 10 s.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)...)
	automatorv1.RegisterProxyServiceServer(gs, srv.ProxyService())
	automatorv1.RegisterAutomatorServiceServer(gs, srv.AutomatorService())

	a.GRPCAddr = lis.Addr().String()
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.HTTPURL = "http://" + hlis.Addr().String()

	runCtx, cancel := context.WithCancel(ctx)
	mux := http.NewServeMux()
	if err := gateway.Mount(runCtx, mux, gs, gateway.Options{TLS: !o.Plaintext, MaxMessage: maxMessage, Authenticate: srv.AuthenticateCaller}); err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	sweeperDone := make(chan struct{})
	go func() { srv.Run(runCtx); close(sweeperDone) }()
	served := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(served) }()
	httpServed := make(chan struct{})
	go func() { _ = hs.Serve(hlis); close(httpServed) }()
	t.Cleanup(func() {
		srv.Shutdown()
		cancel()
		<-sweeperDone
		gs.Stop()
		<-served
		// Shutdown, not Close: it also waits for connections still
		// finishing an answer, so no goroutine outlives the test.
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = hs.Shutdown(sctx)
		scancel()
		<-httpServed
		st.Close()
	})
	return a
}

// URL is the gRPC address as a client takes it: https://127.0.0.1:PORT
// (http:// when plaintext).
func (a *Automator) URL() string {
	if a.Plaintext {
		return "http://" + a.GRPCAddr
	}
	return "https://" + a.GRPCAddr
}

// CountWork is the number of units the store holds, read straight from the
// SQLite file.
func (a *Automator) CountWork(t testing.TB) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(a.dbPath)+"?_pragma=query_only(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM work`).Scan(&n); err != nil {
		t.Fatalf("counting units of work: %v", err)
	}
	return n
}

// ProxyConn is a connection authenticated with the account's token, for a
// test that plays a proxy itself.
func (a *Automator) ProxyConn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	return a.conn(t, a.Token)
}

// CallerConn is a connection authenticated with the API key.
func (a *Automator) CallerConn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	return a.conn(t, a.APIKey)
}

// SecretConn is a connection that presents secret (a wrong token, say).
func (a *Automator) SecretConn(t testing.TB, secret string) *grpc.ClientConn {
	t.Helper()
	return a.conn(t, secret)
}

func (a *Automator) conn(t testing.TB, secret string) *grpc.ClientConn {
	creds := insecure.NewCredentials()
	if !a.Plaintext {
		tlsCfg, err := pki.ClientTLS(a.CAPEM, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		creds = credentials.NewTLS(tlsCfg)
	}
	// WatchAnswers, as the proxy and the client dial: what a call's
	// bound (grpcwire.BeginWithin) tells of it, sent or not, is then as in
	// production.
	c, err := grpc.NewClient("passthrough:///"+a.GRPCAddr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(secret, !a.Plaintext)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
	}, grpcwire.WatchAnswers()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func createAccount(t testing.TB, st store.Store, master crypto.MasterKey, name string) (string, crypto.Key) {
	t.Helper()
	token, err := crypto.NewToken("opt_")
	if err != nil {
		t.Fatal(err)
	}
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := master.SealKey(name, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AccountCreate(context.Background(), store.AccountCreateParams{
		Name: name, TokenHash: crypto.HashToken(token), KeyID: key.ID, SealedKey: sealed, Now: time.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	return token, key
}

// WriteScript writes an executable /bin/sh script into dir. No process
// forks meanwhile (every fork takes syscall.ForkLock): one forked by a test
// running beside it would inherit the file open for writing until its own
// exec, and a run of the script then would fail with "text file busy".
func WriteScript(t testing.TB, dir, name, body string) {
	t.Helper()
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// WaitFor fails the test unless cond holds within timeout, looking every
// 10 ms. For conditions no channel signals: a file appearing, a process
// ending, a row in the store.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
