package server_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/lastread"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// env is a real automator on 127.0.0.1:0 over real TLS with a real SQLite
// file, with shortened windows.
type env struct {
	t       *testing.T
	store   store.Store
	srv     *server.Server
	addr    string
	caPEM   []byte
	apiKey  string
	account string
	token   string
	key     crypto.Key
	master  crypto.MasterKey
	dbPath  string // the SQLite file of store
}

type envOptions struct {
	pollWindow time.Duration
	clock      server.Clock  // the real clock when nil
	limits     server.Limits // the defaults when zero
	log        io.Writer     // discarded when nil
	logLevel   slog.Level    // the lowest level logged (Info when zero)
	// wrap, when set, wraps the store the server is given (e.store stays
	// the bare one).
	wrap    func(store.Store) store.Store
	metrics server.Metrics // none when nil
	// sweepInterval is the server's SweepInterval (its default when zero).
	sweepInterval time.Duration
	// sweepTimeout is the server's SweepTimeout (its default when zero).
	sweepTimeout time.Duration
	// broadcaster is the server's Broadcaster (none when nil).
	broadcaster server.Broadcaster
	// waitRecheck is the server's WaitRecheck (its default when zero).
	waitRecheck time.Duration
	// quietConns keeps the server from asking anything of a connection
	// on its own: its flow-control windows are fixed, so it sends no BDP
	// ping after a request's data, whose answer a connection the test
	// means to keep silent (its client frozen) would deliver a moment
	// later, when the test's clock may have moved on.
	quietConns bool
	// pollLeft, when set, is the server's OnPollLeft hook.
	pollLeft func(account, instance string, inFlight int)
	// pollWindowEnds, when set, is the server's OnPollWindow hook: it
	// ends the polls' windows in place of their timers.
	pollWindowEnds func(account, instance string, window time.Duration) <-chan time.Time
	// sweepTimeouts, when set, ends the store calls SweepTimeout bounds
	// when the test passes that timeout (sweepTimeouts.pass), in place of
	// their timers.
	sweepTimeouts *sweepTimeouts
}

// sweepTimeouts stands for the timers of the store calls SweepTimeout
// bounds (the server's OnSweepTimeout hook): none passes until the test
// says so, however slow the machine.
type sweepTimeouts struct {
	mu      sync.Mutex
	pending []func()
}

func (s *sweepTimeouts) add(_ time.Duration, expire func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, expire)
}

// pass makes SweepTimeout pass for every store call begun so far: those
// still waiting for an answer are given up.
func (s *sweepTimeouts) pass() {
	s.mu.Lock()
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, expire := range pending {
		expire()
	}
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.pollWindow == 0 {
		o.pollWindow = 2 * time.Second
	}
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	master, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: st, account: "acme", master: master, dbPath: filepath.Join(dir, "automator.db")}

	// Account and API key, made the way the CLI makes them.
	e.token, _ = crypto.NewToken("opt_")
	e.key, _ = crypto.NewKey(1)
	sealed, err := master.SealKey(e.account, e.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: e.account, TokenHash: crypto.HashToken(e.token), KeyID: 1, SealedKey: sealed, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e.apiKey, _ = crypto.NewToken("oak_")
	if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: "admin", Hash: crypto.HashToken(e.apiKey), Name: "test", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}

	if o.log == nil {
		o.log = io.Discard
	}
	var given store.Store = st
	if o.wrap != nil {
		given = o.wrap(st)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var now func() time.Time
	if o.clock != nil {
		now = o.clock.Now
	}
	// As serve's: which connections were heard from lately, by clock.
	lis := lastread.Wrap(raw, now)
	srv, err := server.New(server.Options{
		Store:         given,
		MasterKey:     master,
		PollWindow:    o.pollWindow,
		Clock:         o.clock,
		Limits:        o.limits,
		Metrics:       o.metrics,
		Logger:        slog.New(slog.NewTextHandler(o.log, &slog.HandlerOptions{Level: o.logLevel})),
		SweepInterval: o.sweepInterval,
		SweepTimeout:  o.sweepTimeout,
		Broadcaster:   o.broadcaster,
		WaitRecheck:   o.waitRecheck,
		Silence:       lis.Silence,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	if o.pollLeft != nil {
		srv.OnPollLeft(o.pollLeft)
	}
	if o.pollWindowEnds != nil {
		srv.OnPollWindow(o.pollWindowEnds)
	}
	if o.sweepTimeouts != nil {
		srv.OnSweepTimeout(o.sweepTimeouts.add)
	}

	ca, err := pki.NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.NewServer(ca, pki.ServerHosts("127.0.0.1"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.caPEM = ca.CertPEM
	pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})),
		grpc.InTapHandle(srv.TapHandle()),
		grpc.UnaryInterceptor(srv.UnaryInterceptor()),
	}
	if o.quietConns {
		// A window set by hand turns the BDP estimation off.
		opts = append(opts, grpc.InitialWindowSize(1<<16), grpc.InitialConnWindowSize(1<<16))
	}
	gs := grpc.NewServer(opts...)
	automatorv1.RegisterProxyServiceServer(gs, srv.ProxyService())
	automatorv1.RegisterAutomatorServiceServer(gs, srv.AutomatorService())
	e.addr = lis.Addr().String()
	runCtx, cancel := context.WithCancel(ctx)
	sweeperDone := make(chan struct{})
	go func() { srv.Run(runCtx); close(sweeperDone) }()
	served := make(chan struct{})
	go func() { gs.Serve(lis); close(served) }()
	t.Cleanup(func() {
		srv.Shutdown()
		cancel()
		waittest.Recv(t, sweeperDone, "the server's Run (sweeper) to return after Shutdown")
		gs.Stop()
		waittest.Recv(t, served, "the gRPC server's Serve to return after Stop")
	})
	return e
}

func (e *env) conn(secret string) *grpc.ClientConn {
	e.t.Helper()
	tlsCfg, err := pki.ClientTLS(e.caPEM, "127.0.0.1")
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)), grpc.WithPerRPCCredentials(grpcwire.Bearer(secret, true)))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) proxyClient() automatorv1.ProxyServiceClient {
	return automatorv1.NewProxyServiceClient(e.conn(e.token))
}

func (e *env) callerClient() automatorv1.AutomatorServiceClient {
	return automatorv1.NewAutomatorServiceClient(e.conn(e.apiKey))
}

// sealResult seals a result the way a proxy does.
func (e *env) sealResult(workID string, r *automatorv1.Result) []byte {
	e.t.Helper()
	plain, err := proto.Marshal(r)
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := crypto.Seal(e.key, e.account, workID, crypto.DirResult, plain)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// openCommand opens a claim's command the way a proxy does.
func (e *env) openCommand(c *automatorv1.Claim) *automatorv1.Command {
	e.t.Helper()
	plain, err := crypto.Open(crypto.Keys{e.key}, c.GetAccount(), c.GetWorkId(), crypto.DirCommand, c.GetSealedCommand())
	if err != nil {
		e.t.Fatalf("opening command of %s: %v", c.GetWorkId(), err)
	}
	var cmd automatorv1.Command
	if err := proto.Unmarshal(plain, &cmd); err != nil {
		e.t.Fatal(err)
	}
	return &cmd
}
