package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// backoff is a capped exponential delay with full jitter that resets on
// success.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	// Half fixed, half random: never a busy loop, never in lockstep.
	return b.cur/2 + rand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }

// PlaintextClosed reports whether err, of a call to the automator at
// automatorURL, says that a plaintext connection (an http:// URL) was
// closed or reset before the automator's HTTP/2 settings came: what an
// automator serving TLS does, without a word, to a connection that does
// not begin with a TLS handshake. automator_url may be http:// only for
// one started with --insecure-plaintext.
func PlaintextClosed(automatorURL string, err error) bool {
	return status.Code(err) == codes.Unavailable && strings.HasPrefix(automatorURL, "http://") &&
		strings.Contains(status.Convert(err).Message(), "error reading server preface")
}

// NotTLS reports whether err, of a call over TLS, says that what answered
// at the automator's address does not speak TLS: the automator's HTTP
// listener (http_listen) given for its gRPC one, an automator serving
// plaintext (--insecure-plaintext, reached with http://), or another
// program.
func NotTLS(err error) bool {
	return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "first record does not look like a TLS handshake")
}

// NotTLSHelp is what to check when NotTLS.
// CertTimeHelp is what the proxy (and `proxy status`) says when the
// automator's certificate failed to verify on its dates (CertTime): this
// host's clock may be what is wrong, not its ca_cert.
const CertTimeHelp = "the automator's certificate is not valid at this host's time (err gives both): check this host's clock (a certificate that `automator init` or `cert renew` made is valid from an hour before), or renew one that expired with `automator cert renew`"

// CertTime tells whether msg, a failed handshake's, says the certificate
// is not valid at this host's time.
func CertTime(msg string) bool {
	return strings.Contains(msg, "certificate has expired or is not yet valid")
}

const NotTLSHelp = "what answers at automator_url does not speak TLS: is its port the automator's HTTP listener (http_listen, 8080 by default) rather than its gRPC one (listen, 8443 by default)? an automator started with --insecure-plaintext is given as http://"

// connState logs the connection to the automator once per change of state,
// not once per attempt, and once more when the cause of a failure changes
// (causeRelog).
type connState struct {
	log       *slog.Logger
	automator string                      // its URL, named when it fails
	route     string                      // which way it is dialled, named when unreachable ("": unsaid)
	resolve   func(context.Context) error // Options.Resolve (nil: not asked)
	up        bool
	known     bool
	lastKind  string
	// lastCause is the failure last logged (its message, without the
	// addresses of a connection's ends), loggedAt when; now is the clock
	// (nil: time.Now).
	lastCause string
	loggedAt  time.Time
	now       func() time.Time
}

// causeRelog is how long after the last line of an outage a failure of the
// same kind but another cause is logged: a web proxy's 502 once its name
// resolved again, a 403 after a reset, a handshake that times out where
// connections were refused. Before, the first cause stood for the whole
// outage (a review).
const causeRelog = time.Minute

// endpoints matches the ends of a connection in an error ("read tcp
// 10.0.0.2:51234->10.0.0.1:8443", "dial tcp 10.0.0.1:8443"): the local
// one differs at each try, and so does the remote one of a name that
// resolves to several addresses, which are tried in turn; the cause is
// the same.
var endpoints = regexp.MustCompile(`(\[[0-9A-Fa-f:.]+(%[^\]\s]+)?\]|[0-9]{1,3}(\.[0-9]{1,3}){3}):[0-9]+`)

func (s *connState) ok() {
	if s.known && s.up {
		return
	}
	s.log.Info("connected to the automator; polling")
	s.up, s.known = true, true
}

func (s *connState) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// lookupWithin bounds connState's lookup of the name it dials.
const lookupWithin = 5 * time.Second

// lookup returns why the name that dialling the automator resolves does
// not resolve (Options.Resolve), or nil.
func (s *connState) lookup() error {
	if s.resolve == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupWithin)
	defer cancel()
	return s.resolve(ctx)
}

// unresolvedHelp follows the error of a name that does not resolve.
const unresolvedHelp = ": check it and this machine's DNS (retrying with backoff)"

// checkName looks up the name dialled (Options.Resolve) before the first
// poll, and logs it as failed polls would when it does not resolve; they
// are then not logged again for the same cause.
func (s *connState) checkName() {
	if err := s.lookup(); err != nil {
		s.up, s.known, s.lastKind, s.lastCause, s.loggedAt = false, true, "unresolved", err.Error(), s.clock()
		s.log.Error(err.Error()+unresolvedHelp, s.withRoute([]any{"automator", s.automator})...)
	}
}

func (s *connState) failed(err error) {
	code := status.Code(err)
	msg := status.Convert(err).Message()
	kind := code.String()
	if code == codes.Unavailable && strings.Contains(msg, "authentication handshake failed") && strings.Contains(msg, "certificate") {
		// gRPC reports a TLS handshake that failed (the automator's
		// certificate not trusted, or not for automator_url's host) as
		// Unavailable, but the automator answered: it is the profile
		// that does not match it. A handshake cut by the network (EOF,
		// a reset) names no certificate and stays "unreachable".
		kind = "handshake"
	}
	if PlaintextClosed(s.automator, err) {
		kind = "plaintext"
	}
	if NotTLS(err) {
		kind = "not TLS"
	}
	var late noAnswerError
	if errors.As(err, &late) {
		// Not unreachable: the connection did not fail (a broken one,
		// or one whose pings go unanswered, fails the poll as
		// Unavailable), but no answer began in time. Or there was none
		// to send the poll on.
		kind = "no answer"
		if !late.sent {
			kind = "no connection"
		}
	}
	var unresolved error
	if kind == "no connection" || (code == codes.Unavailable && strings.Contains(msg, "produced zero addresses")) {
		// No connection was tried: a name did not resolve, which gRPC
		// does not say in words of its own (see Options.Resolve).
		unresolved = s.lookup()
		if unresolved != nil {
			kind = "unresolved"
		}
	}
	cause := endpoints.ReplaceAllString(msg, "ADDR")
	switch kind {
	case "no answer", "no connection":
		cause = kind // its message holds the bound, which may differ at each try
	case "unresolved":
		cause = unresolved.Error()
	}
	if s.known && !s.up && kind == s.lastKind && (cause == s.lastCause || s.clock().Sub(s.loggedAt) < causeRelog) {
		return
	}
	s.up, s.known, s.lastKind, s.lastCause, s.loggedAt = false, true, kind, cause, s.clock()
	attrs := []any{"automator", s.automator, "code", code.String(), "err", msg} // its name, in JSON too
	switch {
	case code == codes.Unauthenticated || code == codes.PermissionDenied:
		s.log.Error("the automator refused this proxy's token: the account's token was rotated and its overlap has ended, or the account was deleted; install the account's current profile, or check `token` in the config (retrying with backoff)", attrs...)
	case kind == "handshake" && CertTime(msg):
		// The check that failed is the certificate's validity at this
		// host's time: its clock may be what is wrong (a review).
		s.log.Error("the TLS handshake with the automator failed: "+CertTimeHelp+" (retrying with backoff)", attrs...)
	case kind == "handshake":
		s.log.Error("the TLS handshake with the automator failed: its certificate is not trusted by this proxy's `ca_cert` (or `pin_sha256`), or not valid for the host of `automator_url`; check them (retrying with backoff)", attrs...)
	case kind == "plaintext":
		s.log.Error("the automator closed the plaintext connection without answering: an automator serving TLS (as serve does unless started with --insecure-plaintext) does so to a connection that does not begin with a TLS handshake, so give `automator_url` as https:// with the profile's `ca_cert` (`proxy status` checks which); or something else on that port closes it (retrying with backoff)", attrs...)
	case kind == "not TLS":
		s.log.Error(NotTLSHelp+" (retrying with backoff)", attrs...)
	case kind == "unresolved":
		s.log.Error(unresolved.Error()+unresolvedHelp, s.withRoute(attrs)...)
	case kind == "no connection":
		s.log.Warn(msg+"; retrying with backoff", s.withRoute(attrs)...)
	case kind == "no answer":
		s.log.Warn(fmt.Sprintf("the automator did not begin its answer to a poll within %v, though the connection did not fail: the automator is slow or stuck, or the link saturated; retrying with backoff", late.within), attrs...)
	case code == codes.Unavailable || code == codes.DeadlineExceeded:
		s.log.Warn("automator unreachable; retrying with backoff", s.withRoute(attrs)...)
	default:
		s.log.Error("poll failed; retrying with backoff", attrs...)
	}
}

// withRoute is attrs and the route, when it is said.
func (s *connState) withRoute(attrs []any) []any {
	if s.route == "" {
		return attrs
	}
	return append(attrs, "route", s.route)
}
