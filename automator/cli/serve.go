package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/gateway"
	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/acceptwait"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/connlimit"
	"github.com/opsgate/opsgate/internal/gctune"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/lastread"
	"github.com/opsgate/opsgate/internal/secretfile"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// maxMessage bounds one gRPC message: a command with its stdin, or a result
// with both output streams at their caps, fits with room to spare. The
// limits of automator.yaml are bounded to fit it.
const maxMessage = config.MaxMessage

// cmdServe runs the automator until ctx is cancelled (SIGINT, SIGTERM).
func cmdServe(ctx context.Context, args []string, env Env) error {
	fs := newFlags("serve", env)
	dir := fs.String("data-dir", "", "the automator's data directory (made by init)")
	listen := fs.String("listen", "", "gRPC address host:port (overrides automator.yaml)")
	httpListen := fs.String("http-listen", "", "HTTP address for /healthz, /readyz, /metrics, the dashboard and the HTTP/JSON API under /v1/ (overrides automator.yaml)")
	db := dbFlag(fs)
	replicaID := fs.String("replica-id", "", "this replica's id among automators sharing a database")
	plaintext := fs.Bool("insecure-plaintext", false, "serve gRPC without TLS; loopback addresses only (tests and demos)")
	logFormat := fs.String("log-format", "", "log format on stderr: text (the default) or json (overrides automator.yaml)")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	if err := requireFlag("data-dir", *dir); err != nil {
		return err
	}
	cfg, err := config.Load(*dir)
	if err != nil {
		return err
	}
	lock, err := lockForServe(*dir)
	if err != nil {
		return err
	}
	defer lock.Release()
	// Serving units at speed keeps little live and allocates fast: collect
	// less often than the default then (internal/gctune).
	defer gctune.Start()()
	for _, o := range []struct {
		dst *string
		v   string
	}{{&cfg.Listen, *listen}, {&cfg.HTTPListen, *httpListen}, {&cfg.DB, *db}, {&cfg.ReplicaID, *replicaID}, {&cfg.LogFormat, *logFormat}} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	cfg.InsecurePlaintext = cfg.InsecurePlaintext || *plaintext
	if err := cfg.Validate(); err != nil {
		src := filepath.Join(*dir, config.FileConfig)
		if *listen != "" || *httpListen != "" || *db != "" || *replicaID != "" || *logFormat != "" || *plaintext {
			src += " or flags" // a bad value may be a flag's, not the file's
		}
		return fmt.Errorf("invalid settings in %s: %w", src, err)
	}
	// Before its lock beside it: a missing database leaves no lock file.
	if err := sqliteExists(*dir, cfg); err != nil {
		return err
	}
	only, err := lockSQLiteForServe(*dir, cfg)
	if err != nil {
		return err
	}
	defer only.Release()
	master, err := readMaster(*dir)
	if err != nil {
		return err
	}
	creds := insecure.NewCredentials()
	var certs *pki.CertReloader // serves a renewed server certificate without a restart
	if !cfg.InsecurePlaintext {
		if certs, err = pki.NewCertReloader(filepath.Join(*dir, config.FileCert), filepath.Join(*dir, config.FileKey)); err != nil {
			// A renewal cut short between its two renames leaves a key
			// that does not match its certificate.
			return fmt.Errorf("%w; `automator cert renew --data-dir %s` makes a new pair from the data directory's CA", err, *dir)
		}
		creds = credentials.NewTLS(pki.ServerTLSFrom(certs))
	}
	// SQLite: its schema before opening it migrates it, for the log (a
	// review saw a migration with nothing said of it; PostgreSQL's Open
	// says what it migrated). Read once the file
	// is known for an automator's: reading it so puts another program's
	// database in WAL mode.
	fromVersion := 0
	if !pgstore.IsDSN(cfg.DB) && sqliteExists(*dir, cfg) == nil && sqliteIsAutomators(ctx, *dir, cfg) == nil {
		if v, _, err := sqlitestore.SchemaVersion(ctx, cfg.DBPath(*dir)); err == nil {
			fromVersion = v
		}
	}
	st, err := openLockedStore(ctx, *dir, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	// SQLite: every read connection open from the start, so that reads
	// never need a file descriptor the automator's connections may hold
	// by then.
	if s, ok := store.Uncached(st).(*sqlitestore.Store); ok {
		// One it may not write would be served, every write failing (a
		// review); the commands that only read still read it.
		if err := s.Unwritable(); err != nil {
			return fmt.Errorf("serve cannot write its database: %w", err)
		}
		if err := s.OpenReaders(ctx); err != nil {
			return err
		}
	}

	if cfg.ReplicaID == "" {
		cfg.ReplicaID = defaultReplicaID(*dir)
	}
	log := newLogger(env.Stderr, cfg.LogFormat).With("replica_id", cfg.ReplicaID)
	// Set once it has shut down: its last line then says it stopped,
	// after what the deferred steps of the stop log (a serving.yaml it
	// could not remove, say: a review saw that after "stopped"), before
	// the store's quiet close.
	shutDown := false
	defer func() {
		if shutDown {
			log.Info("stopped")
		}
	}()
	toVersion := sqlitestore.LatestVersion()
	if s, ok := store.Uncached(st).(*pgstore.Store); ok {
		// PostgreSQL: Open says what it migrated (a review: a rolling
		// upgrade's migration was never said, nor which replica made it).
		fromVersion, toVersion = s.Migrated()
	}
	if fromVersion > 0 && fromVersion < toVersion {
		log.Info("migrated the database to this binary's schema", "db", servedDB(*dir, cfg), "from_version", fromVersion, "to_version", toVersion)
	}
	// In a container (or a systemd unit) with a memory limit, the collector
	// works harder near it rather than let the kernel kill the automator
	// for garbage (internal/gctune).
	memCtx, stopMem := context.WithCancel(ctx)
	defer stopMem()
	if ml, ok := gctune.LimitMemory(memCtx); ok {
		log.Info(fmt.Sprintf("the automator's cgroup limits its memory to %s: its garbage collector works harder past %s (GOMEMLIMIT, %.0f %% of it)",
			mebibytes(ml.Cgroup), mebibytes(ml.Soft), 100*gctune.Ratio), "memory_limit", ml.Cgroup, "gomemlimit", ml.Soft)
	}
	releaseID, err := holdReplicaID(ctx, st, cfg.ReplicaID, log)
	if err != nil {
		return err
	}
	defer releaseID()
	unopened, err := checkMasterKey(ctx, st, master, *dir, cfg)
	if err != nil {
		return err
	}
	if len(unopened) > 0 {
		log.Error("the master key does not open these accounts' keys: their calls will fail", "count", len(unopened), "accounts", firstNames(unopened, 20))
	}
	warnUnknownRevealKeys(ctx, st, cfg.DashboardRevealKeys, *dir, *db, log)
	logCertificateReloads(certs, log)
	// Metrics: queue events from the server, the latency of every store
	// call, per-account gauges read from the store at each scrape, the
	// store's batches.
	m := metrics.New(metrics.Options{OnlineWithin: server.InstanceOnlineWithin(cfg.PollWindow), Logger: log})
	timed := m.Store(st)
	m.WatchAccounts(timed)
	if src := batchesOf(st); src != nil {
		m.WatchBatches(src)
	}
	raw, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening for gRPC on %s: %w", cfg.Listen, err)
	}
	if cfg.InsecurePlaintext {
		// The config allows "localhost", which /etc/hosts may map to
		// another address: the address bound is what counts.
		if err := grpcwire.CheckLoopbackPeer(raw.Addr()); err != nil {
			raw.Close()
			return fmt.Errorf("listening for gRPC in plaintext on %s: bound %v, not a loopback address (\"localhost\" resolved elsewhere?): serve TLS, or listen on 127.0.0.1", cfg.Listen, raw.Addr())
		}
	}
	// Both listeners leave the automator a reserve of file descriptors
	// (internal/acceptwait). And which connections were heard from
	// lately: a poll on one silent for long (its proxy's host lost power)
	// is handed work last.
	headroom := acceptwait.NewHeadroom(log)
	lis := lastread.Wrap(acceptwait.Wrap(grpcwire.LimitNotSentListener(raw), headroom, acceptOptions("gRPC", metrics.ListenerGRPC, m, log)), nil)
	defer lis.Close()
	srv, err := server.New(server.Options{
		Store:          timed,
		MasterKey:      master,
		DefaultTimeout: cfg.DefaultTimeout,
		PollWindow:     cfg.PollWindow,
		Limits:         serverLimits(cfg.Limits),
		Metrics:        m,
		Logger:         log,
		// PostgreSQL: queue events reach the other replicas (NOTIFY/LISTEN).
		Broadcaster: broadcasterFor(st),
		Silence:     lis.Silence,
		Repair:      repairHint(*dir, *db, cfg),
	})
	if err != nil {
		return err
	}
	if broadcasterFor(st) != nil {
		m.WatchListening(srv.Listening)
	}
	gs := grpc.NewServer(append(grpcwire.ServerOptions(),
		grpc.Creds(creds),
		// Credentials are checked from a call's headers, before its
		// request is read (Server.TapHandle), and again by the interceptor
		// for a call the tap did not authenticate.
		grpc.InTapHandle(srv.TapHandle()),
		grpc.UnaryInterceptor(srv.UnaryInterceptor()),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxSendMsgSize(maxMessage),
		// Every proxy instance holds a connection open, almost always idle,
		// so per-connection memory is what counts: no read buffer of gRPC's
		// own over TLS, which buffers each connection's input itself (a
		// second 32 KiB buffer per connection would only copy it), a small
		// one for plaintext. Write buffers are shared between flushes by
		// default. Message sizes are not affected.
		grpc.ReadBufferSize(readBufferSize(cfg.InsecurePlaintext)),
		// Proxies ping every 10 s so middleboxes keep idle connections open
		// and dead ones are noticed; allow that, refuse faster pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: serverPingTimeout}),
		// Anyone who can reach the listener can open a connection: one that
		// never finishes its TLS handshake and HTTP/2 preface holds a file
		// descriptor and a goroutine for grpcHandshakeTimeout (gRPC's own
		// default is 2 minutes), and a request's metadata is decoded, before
		// any credential is looked at, up to maxHeaderList (gRPC's own
		// default is 16 MiB).
		grpc.ConnectionTimeout(grpcHandshakeTimeout),
		grpc.MaxHeaderListSize(maxHeaderList),
	)...)
	automatorv1.RegisterProxyServiceServer(gs, srv.ProxyService())
	automatorv1.RegisterAutomatorServiceServer(gs, srv.AutomatorService())
	// /readyz and the gRPC health service answer alike, and share the log
	// of the store's readiness.
	ready := newReadiness(timed, srv.ShuttingDown, log)
	healthpb.RegisterHealthServer(gs, newHealthServer(ready))

	hraw, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("listening for HTTP on %s: %w", cfg.HTTPListen, err)
	}
	if w := plainHTTPWarning(cfg.HTTPListen); w != "" {
		log.Warn(w, "http_listen", cfg.HTTPListen)
	}
	// At the cap, the connection idle the longest is closed for a new
	// one; with none idle, the next waits in the kernel's queue, holding
	// none of the file descriptors that the proxies' gRPC connections need.
	hlis := connlimit.New(acceptwait.Wrap(hraw, headroom, acceptOptions("HTTP", metrics.ListenerHTTP, m, log)), httpMaxConnections(cfg), httpCapOptions(httpMaxConnections(cfg), m, log))
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", healthz(srv.ShuttingDown))
	dash, err := operatorHandlers(mux, timed, ready, m, srv, master, *dir, cfg, *db, log)
	if err != nil {
		return err
	}
	var served func() *x509.Certificate
	if certs != nil {
		served = func() *x509.Certificate { return certs.Certificate().Leaf }
	}
	hosts := newHostGuard(cfg, served, log)
	hs := newHTTPServer(hosts.wrap(mux), log)
	hs.ConnState = hlis.ConnState
	hs.RegisterOnShutdown(dash.Close)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	startPprof(runCtx, log) // only with $AUTOMATOR_PPROF_ADDR (make bench PROFILE=1)
	watchCertificates(runCtx, certs, *dir, m, log)
	// HTTP/JSON API and /v1/openapi.json: calls of gs, authenticated by its interceptor.
	// The gateway's connection to the gRPC server lives until the HTTP
	// server has shut down: closed with runCtx, at the start of the
	// shutdown, it cut the answers of the calls that shutdown ends, an
	// execute's "wait for work ID again" among them, and an HTTP caller
	// without an idempotency key got a 503 that named no unit (a review).
	gatewayCtx, stopGateway := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGateway()
	if err := gateway.Mount(gatewayCtx, mux, gs, gateway.Options{TLS: !cfg.InsecurePlaintext, MaxMessage: maxMessage, MaxBody: serverLimits(cfg.Limits).JSONBodyBound(), Authenticate: srv.AuthenticateCaller, BodyTimeout: httpBodyTimeout}); err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(lis) }()
	go func() { errc <- hs.Serve(hlis) }()
	sweeperDone := make(chan struct{})
	go func() { srv.Run(runCtx); close(sweeperDone) }()
	// Instances' polls are kept in memory and written in batches until
	// every poll has ended (after the gRPC stop below); then what is left.
	recordCtx, stopRecording := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRecording()
	recorderDone := make(chan struct{})
	go func() { srv.RecordInstances(recordCtx); close(recorderDone) }()
	heartbeatDone := startHeartbeat(runCtx, st, cfg.ReplicaID, srv.LogStoreFailure, log)
	purgeDone := startPurge(runCtx, srv, dash, timed, cfg.WorkRetention, cfg.AuditRetention, log)
	sendAwayDone := make(chan struct{})
	if reach := reachOf(st); reach != nil {
		// Replicas on one database: one cut off from it sends its
		// proxies and callers to the others (sendaway.go).
		sa := &sendAway{since: srv.DatabaseUnreachableSince, reach: reach, closeAll: lis.CloseAll, keepAlives: hs.SetKeepAlivesEnabled, log: log}
		go func() { sa.run(runCtx); close(sendAwayDone) }()
	} else {
		close(sendAwayDone)
	}

	serving := config.Serving{GRPC: lis.Addr().String(), HTTP: hlis.Addr().String(), Plaintext: cfg.InsecurePlaintext, DB: servedDB(*dir, cfg)}
	if err := config.WriteServing(*dir, serving); err != nil {
		return fmt.Errorf("writing %s: %w", config.FileServing, err)
	}
	defer func() {
		if err := config.RemoveServing(*dir, serving); err != nil {
			log.Warn("removing "+config.FileServing+" at stop", "err", err)
		}
	}()
	warnExposedSecrets(log, *dir)
	warnSchemeMismatch(log, *dir, cfg, lis.Addr())
	log.Info("serving", "grpc", lis.Addr().String(), "http", hlis.Addr().String(), "tls", !cfg.InsecurePlaintext, "db", describeDB(*dir, cfg))
	checkDone := startCheck(runCtx, st, repairHint(*dir, *db, cfg), log)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case serveErr = <-errc:
	}
	srv.Shutdown()
	cancel()
	<-sweeperDone
	<-heartbeatDone
	<-purgeDone
	<-checkDone
	<-sendAwayDone
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
	}
	stopRecording()
	<-recorderDone
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShut()
	_ = hs.Shutdown(shutCtx)
	stopGateway()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, grpc.ErrServerStopped) {
		return fmt.Errorf("serving: %w", serveErr)
	}
	// A review: "shutting down" was the last line, and said nothing of
	// whether the shutdown finished.
	shutDown = true
	return nil
}

// serverPingTimeout is how long the automator's keepalive waits for the
// answer to its ping, sent to a connection it has read nothing from for
// 30 s (grpc-go also makes it the socket's TCP_USER_TIMEOUT). The ping
// waits behind what the automator has already written to the connection
// (gRPC's write buffer, 32 KiB, and what the kernel holds unsent,
// grpcwire.NotSentLowat, and in flight): a large command on its way to a
// proxy behind 64 kbit/s is 70–120 KB of it, 9–15 s (measured in network
// namespaces), and with 10 s the connection was dropped in the middle of
// the command (a review). 20 s, as the proxy gives the pings of its
// connection that posts large results; a dead connection is given up
// within 50 s.
const serverPingTimeout = 20 * time.Second

// acceptOptions are those of a listener named name in the log, counted
// under label on /metrics. Short of file descriptors, it waits to accept
// and says so once when it begins and once when it is over (a failed
// accept was logged at each try by the HTTP server, and not at all by
// gRPC's).
func acceptOptions(name, label string, m *metrics.Metrics, log *slog.Logger) acceptwait.Options {
	return acceptwait.Options{Name: name, Who: "the automator", Log: log, Waited: func(d time.Duration) { m.AcceptWaited(label, d) }}
}

// httpCapOptions count what the HTTP listener does at its cap of max
// connections, and warn, at most once every capWarnEvery, when a new
// connection waits for one to close.
func httpCapOptions(max int, m *metrics.Metrics, log *slog.Logger) connlimit.Options {
	var mu sync.Mutex
	var warned time.Time
	return connlimit.Options{
		Evicted: func() { m.HTTPCap(metrics.HTTPCapIdleClosed) },
		Waiting: func() {
			m.HTTPCap(metrics.HTTPCapWaited)
			mu.Lock()
			defer mu.Unlock()
			if now := time.Now(); warned.IsZero() || now.Sub(warned) >= capWarnEvery {
				warned = now
				log.Warn(fmt.Sprintf("the HTTP listener holds http_max_connections (%d) connections, each in a request or idle for less than %v: new connections wait until one ends or has been idle that long; raise http_max_connections for more HTTP callers at once, or call over gRPC (automator_http_connection_cap_total counts the waits; this line comes at most once a minute)", max, connlimit.DefaultMinIdle))
			}
		},
	}
}

// capWarnEvery is how often at most the log says that HTTP connections
// wait at the cap.
const capWarnEvery = time.Minute

// mebibytes says n bytes in MiB.
func mebibytes(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// httpMaxConnections is http_max_connections, or its default when it is
// left out (0).
func httpMaxConnections(cfg config.Config) int {
	if cfg.HTTPMaxConnections > 0 {
		return cfg.HTTPMaxConnections
	}
	return config.DefaultHTTPMaxConnections
}

// newHTTPServer is the server of the HTTP listener. Its own complaints (an
// accept error when the process runs out of file descriptors, a handler's
// panic) go to serve's log, in its format, not as plain lines on the
// process's stderr.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: httpReadTimeout, IdleTimeout: httpIdleTimeout,
		MaxHeaderBytes: httpMaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}
}

// httpMaxHeaderBytes bounds the headers of one request on the HTTP
// listener (Go's default is 1 MiB). A caller's are well under 8 KiB (an
// API key, a dashboard cookie of under 1 KiB). Headers are read before
// any key is looked at, for up to 10 s: at 1 MiB, the cap's 1,024
// connections each sending headers that never end made the automator hold
// 0.5 GB, again every 10 s.
const httpMaxHeaderBytes = 64 << 10

// grpcHandshakeTimeout bounds the time a new connection to the gRPC
// listener has to complete its TLS handshake and HTTP/2 preface, as
// ReadHeaderTimeout does for the HTTP listener: a proxy finishes in a few
// round trips. The deadline is lifted once the connection is set up, so
// a long poll on it is not cut. A variable for tests.
var grpcHandshakeTimeout = 10 * time.Second

// maxHeaderList bounds the metadata (HTTP/2 header list) of one gRPC
// request: a proxy's or a caller's is well under 1 KiB. It is above the
// HTTP listener's own bound on request headers (httpMaxHeaderBytes), so
// the headers that the HTTP/JSON gateway forwards as metadata stay within
// it.
// A request over it is reset (RST_STREAM) without being decoded further.
const maxHeaderList = 1 << 20

// httpIdleTimeout is how long the HTTP listener keeps a connection open
// with no request in progress: without one, every connection a client left
// open after a request (anyone may make one: /healthz needs no key) would
// be held until the process runs out of file descriptors. Two minutes is
// longer than the idle timeouts of the usual reverse proxies and load
// balancers in front (nginx, AWS ALB: 60 s), so it is always they that
// close first, never racing a request they send. A variable for tests.
var httpIdleTimeout = 2 * time.Minute

// httpReadTimeout bounds the time a request's headers and body take to
// arrive on the HTTP listener. Without it a client could send a body a
// byte at a time and hold its connection for ever: any path does, even one
// that reads no body (the HTTP server reads up to 256 KiB of an unread
// body before it answers). It bounds only the reading: the answer may take
// as long as it takes (an execute or a wait, a dashboard event stream),
// since the HTTP server lifts the deadline once the body has been read.
// Ten seconds, as for the headers alone: no request that anyone may send
// without a key has a body larger than the dashboard's sign-in form, and
// with two minutes the cap's worth of connections sending bodies a byte
// at a time held the listener for two minutes at a go. A request of the
// API whose key is accepted has httpBodyTimeout for its body from then. A
// variable for tests.
var httpReadTimeout = 10 * time.Second

// httpBodyTimeout is the time the body of an API request whose key was
// accepted has to arrive (gateway.Options.BodyTimeout): two minutes carry
// the largest body (16 MiB) at about 1 Mbit/s. A variable for tests.
var httpBodyTimeout = 2 * time.Minute

// purgeEvery is how often serve deletes what it no longer needs: the ended
// units past work_retention, the audit events past audit_retention, the records of dashboard sign-outs whose
// sessions have expired and the heartbeats of replicas not heard from for
// replicaForgetAfter. It finishes the account deletions left unfinished
// as often.
const purgeEvery = time.Hour

// startPurge deletes, at once and then every purgeEvery until ctx is done,
// the records of dashboard sign-outs whose sessions have expired, the
// heartbeats of replicas not heard from for replicaForgetAfter and, with a
// retention, the ended units past it and, with an audit retention, the
// audit events past that; then it finishes the account deletions left
// unfinished (server.FinishDeletions). The returned channel closes when it
// has stopped.
func startPurge(ctx context.Context, srv *server.Server, dash *dashboard.Dashboard, st store.Store, retention, auditRetention time.Duration, log *slog.Logger) <-chan struct{} {
	purge := func() {
		if retention > 0 {
			if _, err := srv.PurgeEnded(ctx, retention); err != nil && ctx.Err() == nil {
				srv.LogStoreFailure("deleting ended units past work_retention", err)
			}
		}
		if auditRetention > 0 {
			if _, err := srv.PurgeAudit(ctx, auditRetention); err != nil && ctx.Err() == nil {
				srv.LogStoreFailure("deleting audit events past audit_retention", err)
			}
		}
		n, err := dash.PurgeEndedSessions(ctx)
		if err != nil && ctx.Err() == nil {
			srv.LogStoreFailure("deleting the sign-outs of expired dashboard sessions", err)
		}
		if n > 0 {
			log.Info("deleted the sign-outs of expired dashboard sessions", "count", n)
		}
		forgetReplicas(ctx, st, time.Now(), srv.LogStoreFailure, log)
		forgetInstances(ctx, st, time.Now(), srv.LogStoreFailure, log)
		// Last, as it may take minutes; after the purge, whose units
		// need no moving.
		srv.FinishDeletions(ctx)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		purge()
		<-every(ctx, purgeEvery, purge)
	}()
	return done
}

// readBufferSize is gRPC's read buffer per connection: none over TLS (the
// TLS connection buffers what it reads), 4 KiB in plaintext.
// plainHTTPWarning is what serve warns of an HTTP listener at addr off
// loopback, "" for one on loopback. It serves plain HTTP only, and its
// HTTP/JSON API and dashboard sign-in take API keys, the admin's
// included: off loopback they cross the network in clear unless a
// TLS-terminating reverse proxy is the only client that reaches it (a
// review: 0.0.0.0 was served without a word, where gRPC's plaintext is
// refused off loopback). Not refused: a load balancer's health checks
// and a reverse proxy on another host of a private network are common.
func plainHTTPWarning(addr string) string {
	if config.RequireLoopback(addr) == nil {
		return ""
	}
	return "http_listen is not a loopback address, and the HTTP listener serves plain HTTP: its HTTP/JSON API and dashboard sign-in take API keys, which cross the network in clear unless a TLS-terminating reverse proxy is all that reaches it (docs/security.md); listen on 127.0.0.1 behind one, or let only it reach this address"
}

func readBufferSize(plaintext bool) int {
	if plaintext {
		return 4 << 10
	}
	return 0
}

// warnUnknownRevealKeys logs a warning for each id of dashboard_reveal_keys
// that names no API key (a typo, a key not made yet): it reveals nothing to
// anyone, and without the warning the setting would seem not to work. Such
// an id is not refused: its key may be made later. The listing it names
// carries the data directory dir, and says to give the same --db when
// serve was given db, which may hold a password and is not repeated.
func warnUnknownRevealKeys(ctx context.Context, st store.Store, ids []string, dir, db string, log *slog.Logger) {
	if len(ids) == 0 {
		return
	}
	keys, err := st.APIKeyList(ctx)
	if err != nil {
		return
	}
	known := make(map[string]bool, len(keys))
	for _, k := range keys {
		known[k.ID] = true
	}
	for _, id := range ids {
		if !known[id] {
			log.Warn("dashboard_reveal_keys in "+config.FileConfig+" names no API key: it reveals nothing until a key with that id exists; `automator apikey list --data-dir "+shellArg(dir)+"` shows the ids"+withSameDB(db), "id", id)
		}
	}
}

// warnExposedSecrets logs, once at start, data directory dir when users
// other than its owner may write it, and each of its files that holds a
// secret and that users other than its owner may read: init
// writes them 0600, so a wider mode came later (a copy, an archive, a
// secret mounted by an orchestrator). The keys let one pose as the
// automator or sign its certificates; the admin API key acts as the
// admin; automator.yaml may hold a database password. Not refused, as the
// directory may be private (the master key, which opens every sealed
// command and result, is: crypto.ReadMasterKeyFile).
func warnExposedSecrets(log *slog.Logger, dir string) {
	if who := secretfile.WritableByOthers(dir); who != "" {
		log.Warn("the data directory is writable by "+who+": whoever may write it may replace its keys, certificates and config; "+secretfile.RestrictDir, "data_dir", dir)
	}
	for _, name := range []string{config.FileCAKey, config.FileKey, config.FileAPIKey, config.FileConfig} {
		path := filepath.Join(dir, name)
		if who := secretfile.ReadableByOthers(path); who != "" {
			log.Warn(name+" holds a secret and is readable by "+who+": "+secretfile.RestrictInDir, "path", path)
		}
	}
}

// warnSchemeMismatch warns when public_url's scheme is not the one serve
// speaks: the profiles `account create` prints name it as automator_url,
// and no proxy given one could use it (a plaintext connection to a TLS
// listener is closed unanswered; a TLS handshake to a plaintext one fails),
// which would otherwise be found only at each proxy. The plaintext URL it
// suggests is listen, where serve listens: plaintext is served on
// loopback only, with nothing in between.
func warnSchemeMismatch(log *slog.Logger, dir string, cfg config.Config, listen net.Addr) {
	u, err := url.Parse(cfg.PublicURL)
	if err != nil {
		return // Validate refused it
	}
	path := filepath.Join(dir, config.FileConfig)
	switch {
	case u.Scheme == "http" && !cfg.InsecurePlaintext:
		log.Warn("public_url is http://, but serve serves TLS: the profiles `account create` prints name an automator_url no proxy can use; set public_url to https://"+u.Host+" in "+path+", or serve plaintext on loopback (--insecure-plaintext)", "public_url", cfg.PublicURL)
	case u.Scheme == "https" && cfg.InsecurePlaintext:
		// The loopback address serve listens on: public_url's host, off
		// loopback, would be refused as a plaintext public_url.
		host := u.Host
		if tcp, ok := listen.(*net.TCPAddr); ok {
			host = net.JoinHostPort(tcp.IP.String(), strconv.Itoa(tcp.Port))
		}
		log.Warn("serving plaintext (insecure_plaintext), but public_url is https://: the profiles `account create` prints name an automator_url whose TLS handshake this automator does not answer; set public_url to http://"+host+" in "+path, "public_url", cfg.PublicURL)
	}
}
