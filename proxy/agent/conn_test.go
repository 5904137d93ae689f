package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestConnectionLogsOneLinePerStateChange: retries against an automator
// that stays down, or polls that keep succeeding, add no log lines; each
// change (up, down, refused, a certificate the profile does not trust)
// adds exactly one, and one that says the
// automator failed names it: gRPC's own message may not (a host name that
// does not resolve gives "produced zero addresses").
func TestConnectionLogsOneLinePerStateChange(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	const url = "https://automator.example:8443"
	s := &connState{log: slog.New(slog.NewJSONHandler(&buf, nil)), automator: url}
	down := status.Error(codes.Unavailable, "connection refused")
	refused := status.Error(codes.Unauthenticated, "invalid account token")
	cut := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`)
	untrusted := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`)
	for range 5 {
		s.failed(down)
	}
	for range 5 {
		s.ok()
	}
	for range 3 {
		s.failed(down)
	}
	s.failed(refused)
	s.failed(refused)
	s.ok()
	for range 3 {
		s.failed(untrusted)
	}
	s.failed(down)
	s.failed(cut) // a handshake the network cut is still down, not untrusted

	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct{ Level, Msg, Automator string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Level != "INFO" && rec.Automator != url {
			t.Errorf("log line %q does not name the automator %s", line, url)
		}
		msgs = append(msgs, rec.Level+" "+rec.Msg)
	}
	want := []string{
		"WARN automator unreachable; retrying with backoff",
		"INFO connected to the automator; polling",
		"WARN automator unreachable; retrying with backoff",
		"ERROR the automator refused this proxy's token: the account's token was rotated and its overlap has ended, or the account was deleted; install the account's current profile, or check `token` in the config (retrying with backoff)",
		"INFO connected to the automator; polling",
		"ERROR the TLS handshake with the automator failed: its certificate is not trusted by this proxy's `ca_cert` (or `pin_sha256`), or not valid for the host of `automator_url`; check them (retrying with backoff)",
		"WARN automator unreachable; retrying with backoff",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("log lines:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}

// TestAnOutageWhoseCauseChangesIsLoggedAgainAMinuteOrMoreAfterItsLastLine:
// a failure of the kind already logged but of another cause (a web
// proxy's 502 where connections were refused) is logged once a minute has
// passed since the last line, not sooner, and not at all when only the
// addresses of the connection's ends differ (a name of several addresses
// tried in turn: a review saw a line a minute for one refusal).
func TestAnOutageWhoseCauseChangesIsLoggedAgainAMinuteOrMoreAfterItsLastLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &connState{log: slog.New(slog.NewJSONHandler(&buf, nil)), automator: "https://automator.example:8443", now: func() time.Time { return now }}
	refused := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.1:8443: connect: connection refused"`)
	badGateway := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: proxy: failed to do connect handshake, status code: 502 Bad Gateway"`)
	reset := func(port int) error {
		return status.Errorf(codes.Unavailable, `connection error: desc = "transport: read tcp 10.0.0.2:%d->10.0.0.1:8443: read: connection reset by peer"`, port)
	}
	// A name of several addresses: each refuses in turn.
	refusedAt := func(addr string) error {
		return status.Errorf(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp %s: connect: connection refused"`, addr)
	}
	step := func(d time.Duration, err error) {
		now = now.Add(d)
		s.failed(err)
	}
	step(0, refused)                                    // logged
	step(10*time.Second, badGateway)                    // another cause, too soon
	step(time.Minute, badGateway)                       // logged
	step(5*time.Minute, badGateway)                     // the same cause
	step(time.Minute, reset(40001))                     // logged
	step(time.Minute, reset(40002))                     // only the local end differs
	step(time.Minute, reset(40003))                     // and again
	step(time.Minute, refusedAt("10.0.0.3:8443"))       // logged: refused, not reset
	step(time.Minute, refusedAt("10.0.0.4:8443"))       // only the address differs
	step(time.Minute, refusedAt("[2001:db8::1]:8443"))  // and again
	step(time.Minute, refusedAt("[fe80::1%eth0]:8443")) // a link-local one, its zone named
	step(time.Second, refused)                          // refused at the first address: the cause of the others
	step(time.Second, badGateway)                       // too soon
	step(58*time.Second, badGateway)                    // a minute since the last line: logged
	var errs []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct{ Msg, Err string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Msg != "automator unreachable; retrying with backoff" {
			t.Errorf("log line %q; want the unreachable line", line)
		}
		errs = append(errs, rec.Err)
	}
	want := []string{status.Convert(refused).Message(), status.Convert(badGateway).Message(), status.Convert(reset(40001)).Message(), status.Convert(refusedAt("10.0.0.3:8443")).Message(), status.Convert(badGateway).Message()}
	if strings.Join(errs, "\n") != strings.Join(want, "\n") {
		t.Errorf("the causes logged:\n%s\nwant:\n%s", strings.Join(errs, "\n"), strings.Join(want, "\n"))
	}
}

// TestConnectionLogNamesTheCodeInJSONAsInText: the gRPC code of a failure
// is its name in a JSON record ("Unavailable"), as in text, not the number
// JSON would make of it.
func TestConnectionLogNamesTheCodeInJSONAsInText(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s := &connState{log: slog.New(slog.NewJSONHandler(&buf, nil)), automator: "https://automator.example:8443"}
	s.failed(status.Error(codes.Unavailable, "connection refused"))
	var rec struct {
		Code any `json:"code"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec.Code != "Unavailable" {
		t.Errorf("code in %s: %v (%v); want \"Unavailable\"", buf.String(), rec.Code, err)
	}
}

// TestUnreachableLineNamesTheRoute: the line that says the automator cannot
// be reached names the way it was dialled (a web proxy down, or refusing
// the tunnel, fails the poll as the automator's outage would); a refusal,
// which the automator itself answered, does not.
func TestUnreachableLineNamesTheRoute(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	const route = "HTTPS_PROXY=http://webproxy.example:3128, NO_PROXY not set: automator.example:8443 through that web proxy"
	s := &connState{log: slog.New(slog.NewJSONHandler(&buf, nil)), automator: "https://automator.example:8443", route: route}
	s.failed(status.Error(codes.Unavailable, "connection refused"))
	s.failed(status.Error(codes.Unauthenticated, "invalid account token"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log lines %q; want 2", lines)
	}
	for i, want := range []string{route, ""} {
		var rec struct{ Msg, Route string }
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Route != want {
			t.Errorf("%q: route %q; want %q", rec.Msg, rec.Route, want)
		}
	}
}

// silentPolls is an automator, served over real gRPC, that never begins its
// answer to a poll that asks for units (its connection stays up), and
// answers the others at once; it counts the polls it left unanswered.
type silentPolls struct {
	automatorv1.UnimplementedProxyServiceServer
	unanswered chan struct{}
}

func (s silentPolls) Poll(ctx context.Context, in *automatorv1.PollRequest) (*automatorv1.PollResponse, error) {
	if in.GetMaxUnits() == 0 {
		return &automatorv1.PollResponse{}, nil
	}
	<-ctx.Done()
	select {
	case s.unanswered <- struct{}{}:
	default:
	}
	return nil, status.FromContextError(ctx.Err()).Err()
}

// serveProxyService serves srv on loopback over real gRPC and returns a
// client of it through a connection set up as the proxy's is for its
// polls (grpcwire.WatchAnswers).
func serveProxyService(t *testing.T, srv automatorv1.ProxyServiceServer, lis net.Listener, dial ...grpc.DialOption) automatorv1.ProxyServiceClient {
	t.Helper()
	gs := grpc.NewServer(append(grpcwire.ServerOptions(), grpc.MaxRecvMsgSize(8<<20))...)
	automatorv1.RegisterProxyServiceServer(gs, srv)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	opts := append(grpcwire.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	opts = append(opts, grpcwire.WatchAnswers()...)
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), append(opts, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); <-served })
	return automatorv1.NewProxyServiceClient(conn)
}

// TestAPollWhoseAnswerDidNotBeginIsLoggedAsSuchOnce: an automator that
// does not begin its answer to a poll in time, on a connection that did
// not fail, is logged as that, with the bound, not as "unreachable" (which
// sent operators looking for a network outage), and once for all the
// polls it leaves unanswered, as an unreachable one is.
func TestAPollWhoseAnswerDidNotBeginIsLoggedAsSuchOnce(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := silentPolls{unanswered: make(chan struct{})}
	client := serveProxyService(t, srv, lis)
	// The connection is set up first: on a loaded machine setting it up
	// may take longer than a poll's 80 ms, which the agent rightly logs
	// as no connection set up, not as the case here.
	if _, err := client.Complete(t.Context(), &automatorv1.CompleteRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("a first call to set the connection up: %v, want Unimplemented", err)
	}
	var log lockedWriter
	log.b = &bytes.Buffer{}
	a := New(Options{
		tune:   tuning{pollMargin: 20 * time.Millisecond},
		Client: client, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: 50 * time.Millisecond, GracePeriod: time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	for range 3 {
		waittest.Recv(t, srv.unanswered, "a poll the automator did not answer")
	}
	cancel()
	waittest.Recv(t, done, "the agent to stop")

	var warns []string
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Level == "WARN" {
			warns = append(warns, rec.Msg)
		}
	}
	want := "the automator did not begin its answer to a poll within 80ms"
	if len(warns) != 1 || !strings.HasPrefix(warns[0], want) {
		t.Fatalf("after 3 polls the automator did not begin to answer, the warnings logged were %q; want one, beginning %q", warns, want)
	}
}

// unresolvedAgent runs an agent whose client's channel gets its addresses
// from r, with resolve as its Options.Resolve, until resolve has been
// asked three times (at the start, and for two failed polls), and returns
// its log's records.
// Only the records that name the automator are returned: those of the
// connection's state (connState).
func unresolvedAgent(t *testing.T, r *manual.Resolver, resolve func(context.Context) error) []struct{ Level, Msg, Code, Err, Route string } {
	t.Helper()
	opts := append(grpcwire.DialOptions(), grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(r.Scheme()+":///automator.example:8443", append(opts, grpcwire.WatchAnswers()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	asked := make(chan struct{})
	var log lockedWriter
	log.b = &bytes.Buffer{}
	const route = "HTTPS_PROXY=http://webproxy.example:3128, NO_PROXY not set: automator.example:8443 through that web proxy"
	a := New(Options{
		// Its stop tells no automator of its lost polls: within 100ms.
		tune:   tuning{pollMargin: 20 * time.Millisecond, reportLostWithin: 100 * time.Millisecond},
		Client: automatorv1.NewProxyServiceClient(conn), Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		Automator: "https://automator.example:8443", Route: route,
		Resolve: func(ctx context.Context) error {
			err := resolve(ctx)
			asked <- struct{}{}
			return err
		},
		MaxConcurrency: 1, PollWait: 50 * time.Millisecond, GracePeriod: time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	for range 3 {
		waittest.Recv(t, asked, "the agent to look up the name it dials (at its start, then after a failed poll)")
	}
	cancel()
	go func() {
		for range asked { // a lookup of a poll that failed as it stopped
		}
	}()
	waittest.Recv(t, done, "the agent to stop")
	close(asked)

	var recs []struct{ Level, Msg, Code, Err, Route string }
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var rec struct{ Level, Msg, Code, Err, Route, Automator string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Automator != "" && rec.Level != "INFO" {
			recs = append(recs, struct{ Level, Msg, Code, Err, Route string }{rec.Level, rec.Msg, rec.Code, rec.Err, rec.Route})
		}
	}
	return recs
}

// failingFrom returns an Options.Resolve that resolves the name its
// first n times, and then fails with err.
func failingFrom(n int, err error) func(context.Context) error {
	var asked atomic.Int32
	return func(context.Context) error {
		if asked.Add(1) > int32(n) {
			return err
		}
		return nil
	}
}

// TestANameThatDoesNotResolveIsSaidAtStart: the agent looks the name it
// dials up before its first poll, and logs at once when it does not
// resolve (through a web proxy whose name does not, the first poll fails
// only at its bound); the polls that then fail for it are not logged
// again.
func TestANameThatDoesNotResolveIsSaidAtStart(t *testing.T) {
	t.Parallel()
	const lookup = "the host of HTTPS_PROXY, webproxy.example, does not resolve: lookup webproxy.example: no such host"
	recs := unresolvedAgent(t, manual.NewBuilderWithScheme("nothing"), failingFrom(0, errors.New(lookup)))
	want := lookup + ": check it and this machine's DNS (retrying with backoff)"
	if len(recs) != 1 || recs[0].Level != "ERROR" || recs[0].Msg != want || recs[0].Code != "" || !strings.Contains(recs[0].Route, "webproxy.example:3128") {
		t.Fatalf("log records %+v; want one ERROR %q, before any poll failed (no code), with the route", recs, want)
	}
}

// TestAPollWithNoConnectionToGoOnSaysWhichNameDoesNotResolve: gRPC waits
// without a word for a connection while the channel's name resolution has
// produced nothing (a web proxy's name that stopped resolving), until the
// poll's bound. The poll was never sent, so the line does not blame the
// automator for an answer that did not begin: it gives the lookup's error
// of the name the proxy dials, once for all such polls.
func TestAPollWithNoConnectionToGoOnSaysWhichNameDoesNotResolve(t *testing.T) {
	t.Parallel()
	const lookup = "the host of HTTPS_PROXY, webproxy.example, does not resolve: lookup webproxy.example: no such host"
	recs := unresolvedAgent(t, manual.NewBuilderWithScheme("nothing"), failingFrom(1, errors.New(lookup)))
	if len(recs) != 1 {
		t.Fatalf("log records %+v; want one", recs)
	}
	want := lookup + ": check it and this machine's DNS (retrying with backoff)"
	if r := recs[0]; r.Level != "ERROR" || r.Msg != want || r.Code != "DeadlineExceeded" ||
		r.Err != "no connection to the automator was set up within 80ms to send the poll on" || !strings.Contains(r.Route, "webproxy.example:3128") {
		t.Errorf("log record %+v; want an ERROR %q, err saying no connection was set up within 80ms, and the route", r, want)
	}
}

// TestAPollWithNoConnectionToGoOnIsNotBlamedOnTheAutomator: when the name
// does resolve (DNS answered late, say), the line still says that there
// was no connection to send the poll on, not that the automator did not
// answer.
func TestAPollWithNoConnectionToGoOnIsNotBlamedOnTheAutomator(t *testing.T) {
	t.Parallel()
	recs := unresolvedAgent(t, manual.NewBuilderWithScheme("nothing"), func(context.Context) error { return nil })
	want := "no connection to the automator was set up within 80ms to send the poll on; retrying with backoff"
	if len(recs) != 1 || recs[0].Level != "WARN" || recs[0].Msg != want {
		t.Fatalf("log records %+v; want one WARN %q", recs, want)
	}
}

// TestANameResolvedToNoAddressIsSaidInTheLookupsWords: a name the DNS does
// not know, gRPC's resolver reports as zero addresses, and its channel
// fails the poll with "produced zero addresses"; the line gives the
// lookup's own error instead, which names the name.
func TestANameResolvedToNoAddressIsSaidInTheLookupsWords(t *testing.T) {
	t.Parallel()
	r := manual.NewBuilderWithScheme("zero")
	r.InitialState(resolver.State{})
	const lookup = "the host of automator_url, automator.example, does not resolve: lookup automator.example: no such host"
	recs := unresolvedAgent(t, r, failingFrom(1, errors.New(lookup)))
	if len(recs) != 1 {
		t.Fatalf("log records %+v; want one", recs)
	}
	if r := recs[0]; r.Level != "ERROR" || r.Msg != lookup+": check it and this machine's DNS (retrying with backoff)" ||
		r.Code != "Unavailable" || !strings.Contains(r.Err, "produced zero addresses") {
		t.Errorf("log record %+v; want an ERROR beginning %q, with gRPC's error", r, lookup)
	}
}

// TestPollsThatReachedNoAutomatorAreNotLost: polls for units that failed
// without reaching an automator (every connection refused: it is down)
// had nothing claimed for them. The proxy's stop does not take them for
// polls whose answers were lost: it neither keeps them in its spool for
// the next start to report nor logs that it stopped without telling the
// automator of them (before, it did both, after trying to report them
// for 5 s).
func TestPollsThatReachedNoAutomatorAreNotLost(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there: every connection is refused
	opts := append(grpcwire.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpcwire.WatchAnswers()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	log := &signalingWriter{lockedWriter: lockedWriter{b: &bytes.Buffer{}}, says: "automator unreachable", said: make(chan struct{})}
	a := New(Options{
		tune:   tuning{reportLostWithin: 200 * time.Millisecond},
		Client: automatorv1.NewProxyServiceClient(conn), Keys: crypto.Keys{testKey}, InstanceID: "down", ScriptsDir: t.TempDir(),
		SpoolDir:       filepath.Join(t.TempDir(), SpoolDirName),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	waittest.Recv(t, log.said, "a poll to fail, the automator unreachable")
	cancel()
	waittest.Recv(t, done, "the agent to stop")
	if strings.Contains(log.String(), "stopped without telling the automator") {
		t.Errorf("the stop took polls that reached no automator for lost ones: %s", log.String())
	}
	if mine, _ := a.spool.loadLost("down"); len(mine) != 0 {
		t.Errorf("the spool keeps %+v for the next start to report; want nothing", mine)
	}
}

// signalingWriter is a lockedWriter that closes said once a write
// contains says.
type signalingWriter struct {
	lockedWriter
	says string
	said chan struct{}
	once sync.Once
}

func (w *signalingWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.says)) {
		w.once.Do(func() { close(w.said) })
	}
	return w.lockedWriter.Write(p)
}

// TestACertificateNotValidAtThisHostsTimeNamesTheClock: a handshake that
// failed on the certificate's dates says to check this host's clock (a
// review: a proxy two days behind was told to check its ca_cert); one
// that failed on trust says to check ca_cert as before.
func TestACertificateNotValidAtThisHostsTimeNamesTheClock(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s := &connState{log: slog.New(slog.NewTextHandler(&buf, nil)), automator: "https://automator.example:8443"}
	s.failed(status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate has expired or is not yet valid: current time 2026-12-07T13:11:33Z is before 2026-12-09T12:00:00Z"`))
	if log := buf.String(); !strings.Contains(log, "certificate is not valid at this host's time") || !strings.Contains(log, "check this host's clock") || strings.Contains(log, "not trusted by this proxy's") {
		t.Errorf("log %q; want it to say the certificate is not valid at this host's time and to check the clock", log)
	}
}
