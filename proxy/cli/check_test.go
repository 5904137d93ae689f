package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/closedport"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/config"
)

// standbyConfig is the valid config of a standby of a's account.
func standbyConfig(t *testing.T, a *automatortest.Automator, token string, key crypto.Key) config.Config {
	t.Helper()
	cfg := config.Config{
		AutomatorURL: a.URL(),
		Token:        token,
		Key:          key.String(),
		CACert:       string(a.CAPEM),
		ScriptsDir:   t.TempDir(),
		InstanceID:   "standby",
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestStatusCheckFindsAStaleStandbyProfile: `proxy status` asks the
// automator, over TLS with the config's CA and token, whether a stopped
// standby's profile still works, so that an operator learns of a rotation
// or a new CA before a failover does: a current profile passes; a token
// rotated with an overlap, a token refused, a key the account no longer
// has as current, another key of the current key's id (whose polls the
// automator refuses), and a CA that did not sign the automator's
// certificate each say the config is out of date; an automator out of reach says
// nothing is known. The check claims nothing and records no instance: a
// standby checked does not look like one polling.
func TestStatusCheckFindsAStaleStandbyProfile(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	ctx := t.Context()
	now := time.Now()

	current := checkProfile(ctx, standbyConfig(t, a, a.Token, a.Key), now)
	if current.stale || current.unreached || !strings.Contains(current.line, "token accepted, current key 1 held") {
		t.Errorf("check of the current profile: %+v, want it accepted with key 1", current)
	}

	otherKey, err := crypto.NewKey(7)
	if err != nil {
		t.Fatal(err)
	}
	if c := checkProfile(ctx, standbyConfig(t, a, a.Token, otherKey), now); !c.stale || !strings.Contains(c.line, "current key 1") {
		t.Errorf("check of a profile without the current key: %+v, want it out of date, naming key 1", c)
	}
	// Another account's key (every account's first key has id 1), or a
	// mistyped one: its id is the current one, its secret is not.
	foreignKey, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	if c := checkProfile(ctx, standbyConfig(t, a, a.Token, foreignKey), now); !c.stale || !c.refused || !strings.Contains(c.line, "key 1 is not the account's key 1") {
		t.Errorf("check of a profile holding another key of the current key's id: %+v, want it refused, naming key 1", c)
	}

	bogus, err := crypto.NewToken("opt_")
	if err != nil {
		t.Fatal(err)
	}
	if c := checkProfile(ctx, standbyConfig(t, a, bogus, a.Key), now); !c.stale || !strings.Contains(c.line, "token refused") {
		t.Errorf("check of a profile with a token the automator does not know: %+v, want it refused", c)
	}

	otherCA, err := pki.NewCA("another automator", now)
	if err != nil {
		t.Fatal(err)
	}
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.CACert = string(otherCA.CertPEM)
	if c := checkProfile(ctx, cfg, now); !c.stale || !strings.Contains(c.line, "not trusted") {
		t.Errorf("check of a profile whose CA did not sign the automator's certificate: %+v, want it untrusted", c)
	}

	// rotate-token with an overlap: the old token works for an hour more.
	newToken, err := crypto.NewToken("opt_")
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour)
	if _, err := a.Store.AccountRotate(ctx, store.AccountRotateParams{Name: a.Account, TokenHash: crypto.HashToken(newToken), PreviousUntil: until, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	old := checkProfile(ctx, standbyConfig(t, a, a.Token, a.Key), time.Now())
	if !old.stale || !strings.Contains(old.line, "previous one, refused from "+until.UTC().Format(time.RFC3339)) {
		t.Errorf("check of the profile before a rotate-token with an overlap: %+v, want it out of date, refused from %s", old, until.UTC().Format(time.RFC3339))
	}
	if c := checkProfile(ctx, standbyConfig(t, a, newToken, a.Key), time.Now()); c.stale || c.unreached {
		t.Errorf("check of the rotated profile: %+v, want it accepted", c)
	}

	// An automator out of reach: a port held that refuses connections.
	cfg = standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL = "https://" + closedport.Addr(t)
	if c := checkProfile(ctx, cfg, time.Now()); c.stale || !c.unreached {
		t.Errorf("check with the automator out of reach: %+v, want unreached, not out of date", c)
	}

	list, err := automatorv1.NewAutomatorServiceClient(a.CallerConn(t)).ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: a.Account})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetInstances()); n != 0 {
		t.Errorf("after the checks the automator lists %d instances (%v), want none: a check is no poll", n, list.GetInstances())
	}
	if n := a.CountWork(t); n != 0 {
		t.Errorf("after the checks the store holds %d units, want none", n)
	}
}

// TestStatusCheckOfAHandshakeCutByTheNetworkIsNotAStaleProfile: a TLS
// handshake that the network cuts (the connection closed before the
// automator's certificate came: a firewall, a load balancer with no
// backend) names no certificate. The automator was not reached, and
// nothing is known of the profile: `status` must not tell the operator
// to install another profile, as it does for a certificate the config's
// CA did not sign.
func TestStatusCheckOfAHandshakeCutByTheNetworkIsNotAStaleProfile(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	addr := closingListener(t) // before any byte of the handshake's answer
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL = "https://" + addr
	c := checkProfile(t.Context(), cfg, time.Now())
	if c.stale || !c.unreached || strings.Contains(c.line, "not trusted") {
		t.Errorf("check through a connection cut during the handshake: %+v, want unreached, not an untrusted certificate", c)
	}
}

// TestStatusCheckOfAnHTTPURLForAnAutomatorServingTLSSaysToGiveHTTPS: a
// config whose automator_url is http:// (plaintext, allowed on loopback)
// for an automator serving TLS, as serve does by default, gets its
// connections closed without a word. The check tells it from something
// else on the port by a TLS handshake: the automator's answers, so the
// config is refused and the line says to give https://; a listener that
// closes every connection (a relay without a backend) answers none, and
// it stays unreached.
func TestStatusCheckOfAnHTTPURLForAnAutomatorServingTLSSaysToGiveHTTPS(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL = "http://" + a.GRPCAddr
	c := checkProfile(t.Context(), cfg, time.Now())
	if !c.stale || !c.refused || c.unreached || !strings.Contains(c.line, "serves TLS") || !strings.Contains(c.line, "give automator_url as https://"+a.GRPCAddr) {
		t.Errorf("check of an http:// URL for an automator serving TLS: %+v, want refused, saying to give https://%s", c, a.GRPCAddr)
	}

	// Closed once the call is written, so that it reads the close (a
	// closed connection's writes may fail first, which is no sign of TLS).
	addr := halfClosingListener(t)
	cfg.AutomatorURL = "http://" + addr
	c = checkProfile(t.Context(), cfg, time.Now())
	if c.stale || c.refused || !c.unreached || strings.Contains(c.line, "TLS") {
		t.Errorf("check of an http:// URL for a listener that closes every connection: %+v, want unreached, saying nothing of TLS", c)
	}
}

// TestStatusCheckOfSomethingNotSpeakingTLSNamesTheLikelyMixUp: a config
// whose automator_url names a port where something answers, but not in
// TLS (the automator's HTTP listener given for its gRPC one, say), is
// not reached, and the line says what to check rather than crypto/tls's
// "first record does not look like a TLS handshake" alone.
func TestStatusCheckOfSomethingNotSpeakingTLSNamesTheLikelyMixUp(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	web := httptest.NewServer(http.NotFoundHandler()) // plaintext HTTP/1.1
	defer web.Close()
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL = "https://" + web.Listener.Addr().String()
	c := checkProfile(t.Context(), cfg, time.Now())
	if c.stale || c.refused || !c.unreached || !strings.Contains(c.line, "does not speak TLS") || !strings.Contains(c.line, "HTTP listener (http_listen") {
		t.Errorf("check of a port answering plaintext HTTP: %+v, want unreached, naming the HTTP listener as the likely mix-up", c)
	}
}

// listenEach listens on loopback until the test ends, hands each
// connection it accepts to handle, in a goroutine of its own, and closes
// them all at the end. It returns its address.
func listenEach(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go handle(c)
		}
	}()
	return l.Addr().String()
}

// closingListener listens on loopback until the test ends, closing every
// connection it accepts before sending anything (a relay or a load
// balancer without a backend), and returns its address.
func closingListener(t *testing.T) string {
	return listenEach(t, func(c net.Conn) { c.Close() })
}

// TestStatusCheckOfAnHTTPURLForATLSFrontThatRefusesTheHandshake: what
// answers the check's TLS handshake with an alert (a front that has no
// certificate for the name, say) serves TLS too, so an http:// URL for it
// is refused, saying to give https://, as for the automator itself.
func TestStatusCheckOfAnHTTPURLForATLSFrontThatRefusesTheHandshake(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	front := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return nil, errors.New("no certificate for this name")
	}}
	addr := listenEach(t, func(c net.Conn) {
		defer c.Close()
		first := make([]byte, 1)
		if _, err := io.ReadFull(c, first); err != nil {
			return
		}
		if first[0] != 0x16 { // not a TLS handshake record
			// Closed, after reading what comes: the client reads the
			// close, not a failed write.
			c.(*net.TCPConn).CloseWrite()
			_, _ = io.Copy(io.Discard, c)
			return
		}
		_ = tls.Server(prefixedConn{c, io.MultiReader(bytes.NewReader(first), c)}, front).Handshake()
	})
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL = "http://" + addr
	c := checkProfile(t.Context(), cfg, time.Now())
	if !c.stale || !c.refused || c.unreached || !strings.Contains(c.line, "serves TLS") || !strings.Contains(c.line, "give automator_url as https://"+addr) {
		t.Errorf("check of an http:// URL for a TLS front that answers the handshake with an alert: %+v, want refused, saying to give https://%s", c, addr)
	}
}

// prefixedConn is a connection whose first bytes were read already: r
// gives them again, then the rest.
type prefixedConn struct {
	net.Conn
	r io.Reader
}

func (c prefixedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// halfClosingListener listens on loopback until the test ends, and ends
// its side of every connection it accepts at once, reading nothing and
// sending nothing: the other side reads its close after any write it
// makes. It returns its address.
func halfClosingListener(t *testing.T) string {
	return listenEach(t, func(c net.Conn) { c.(*net.TCPConn).CloseWrite() })
}

// TestStatusCheckOfAnAutomatorThatNeverAnswersSaysNoConnectionWasSetUp: a
// config whose automator accepts the connection and never answers its TLS
// handshake (a stopped process whose kernel still accepts, a black hole
// past a proxy) is not reached, and the line says no connection was set up
// in the time, naming the URL, rather than gRPC's "context deadline
// exceeded while waiting for connections to become ready".
func TestStatusCheckOfAnAutomatorThatNeverAnswersSaysNoConnectionWasSetUp(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	silent := listenEach(t, func(net.Conn) {}) // open, and silent
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL = "https://" + silent
	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // the check's own bound is 5 s
	defer cancel()
	c := checkProfile(ctx, cfg, time.Now())
	if c.stale || c.refused || !c.unreached || !strings.Contains(c.line, "no connection to "+cfg.AutomatorURL+" was set up") || strings.Contains(c.line, "waiting for connections") {
		t.Errorf("check of an automator that never answers its handshake: %+v, want unreached, saying no connection was set up", c)
	}
}

// TestAStatusCheckWithARefusedTokenIsAuditedAsACheck: `proxy status`'s
// check of a config whose token is refused is audited as any refused
// token is (auth.failed), naming the check, so that a standby's check is
// not taken for a proxy posting a result; a Complete of a running proxy
// refused so is audited without that.
func TestAStatusCheckWithARefusedTokenIsAuditedAsACheck(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	wrong, err := crypto.NewToken("opt_")
	if err != nil {
		t.Fatal(err)
	}
	if c := checkProfile(t.Context(), standbyConfig(t, a, wrong, a.Key), time.Now()); !c.refused {
		t.Fatalf("check with a token the automator does not know: %+v, want refused", c)
	}
	conn, err := Dial(standbyConfig(t, a, wrong, a.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := automatorv1.NewProxyServiceClient(conn).Complete(t.Context(), &automatorv1.CompleteRequest{WorkId: "w_0123456789abcdef0123456789abcdef"}); err == nil {
		t.Fatal("a result posted with a token the automator does not know was accepted")
	}
	events, err := a.Store.AuditList(t.Context(), store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, e := range events {
		if e.Kind == store.AuditAuthFailed {
			details = append(details, e.Detail)
		}
	}
	if len(details) != 2 || !strings.Contains(details[0], "Complete (`proxy status` checking a config)") || strings.Contains(details[1], "proxy status") {
		t.Errorf("auth.failed records: %q; want the check's naming it, then the posted result's not", details)
	}
}

// TestStatusCheckOfAStuckAutomatorDoesNotSayNoConnectionWasSetUp: an
// automator whose connection is set up (TLS, HTTP/2) but that does not
// answer the check in its time (stuck, overloaded) is not reached, and the
// line does not say that no connection was set up: that is only for
// gRPC's "while waiting for connections to become ready".
func TestStatusCheckOfAStuckAutomatorDoesNotSayNoConnectionWasSetUp(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	// An HTTP/2 server over TLS that takes the call and answers nothing
	// until the caller gives up. Not a gRPC server: one resets the
	// stream at the deadline the call sends it (grpc-timeout), which on
	// a loaded machine may come before the check's own timer.
	web := httptest.NewUnstartedServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	web.EnableHTTP2 = true
	web.StartTLS()
	defer web.Close()
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL = "https://" + web.Listener.Addr().String()
	cfg.CACert = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: web.Certificate().Raw}))
	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // the check's own bound is 5 s
	defer cancel()
	c := checkProfile(ctx, cfg, time.Now())
	if c.stale || c.refused || !c.unreached || strings.Contains(c.line, "no connection") || !strings.Contains(c.line, "deadline exceeded") {
		t.Errorf("check of an automator whose connection is set up but that does not answer: %+v, want unreached, with gRPC's words, not that no connection was set up", c)
	}
}

// TestStatusCheckOfANameThatDoesNotResolveSaysSo: gRPC would say
// "produced zero addresses" of the automator's name that does not resolve
// (and wait out the check's bound for a web proxy's); the check says which
// name, in the lookup's words. Not parallel: it sets checkResolver.
func TestStatusCheckOfANameThatDoesNotResolveSaysSo(t *testing.T) {
	defer func(r *net.Resolver) { checkResolver = r }(checkResolver)
	checkResolver = noDNS
	a := automatortest.Start(t, automatortest.Options{})
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL = "https://automator.invalid:8443"
	c := checkProfile(t.Context(), cfg, time.Now())
	want := "not reached: the host of automator_url, automator.invalid, does not resolve: lookup automator.invalid"
	if c.stale || !c.unreached || !strings.HasPrefix(c.line, want) || !strings.HasSuffix(c.line, ": check it and this machine's DNS") {
		t.Errorf("check of an automator_url whose host does not resolve: %+v; want unreached, %q…", c, want)
	}
}

// TestStatusCheckOfACertificateNotValidAtThisHostsTimeNamesTheClock: a
// certificate whose dates do not hold at this host's time (made two days
// ahead: as this host's clock two days behind sees it) is not an untrusted
// profile: the check says to look at the clock, not to install another
// profile (a re-review: it said so).
func TestStatusCheckOfACertificateNotValidAtThisHostsTimeNamesTheClock(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	later := time.Now().Add(48 * time.Hour)
	ca, err := pki.NewCA("an automator ahead", later)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pki.NewServer(ca, []string{"127.0.0.1"}, later)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(srv.CertPEM, srv.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	cfg := standbyConfig(t, a, a.Token, a.Key)
	cfg.AutomatorURL, cfg.CACert = "https://"+l.Addr().String(), string(ca.CertPEM)
	c := checkProfile(t.Context(), cfg, time.Now())
	if c.stale || c.refused || !c.unreached || !strings.Contains(c.line, "not valid at this host's time") || !strings.Contains(c.line, "check this host's clock") {
		t.Errorf("check of an automator whose certificate is valid only from two days ahead: %+v; want it not reached, saying to check the clock, not a stale profile", c)
	}
}
