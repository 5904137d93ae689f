package cli

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
	"github.com/opsgate/opsgate/proxy/config"
)

// checkTimeout bounds `proxy status`'s check of the automator, connection
// included: an automator out of reach makes status wait this long, no more.
const checkTimeout = 5 * time.Second

// checkResolver looks up the name checkProfile dials (resolveProblem).
// Tests give one that asks no DNS server.
var checkResolver = net.DefaultResolver

// profileCheck is what the automator says of a config's profile.
type profileCheck struct {
	// line is the answer, one line for status's "automator:" row.
	line string
	// stale says the profile is out of date: refused now (a rotated or
	// deleted account, a CA the automator no longer uses), or soon (a
	// previous token, a key the automator no longer hands out).
	stale bool
	// refused says the automator refuses the profile now (its token, or
	// its trust of the automator's certificate): a proxy running on it
	// polls nothing.
	refused bool
	// unreached says the automator did not answer (down, or no way to it
	// from here), so nothing is known of the profile.
	unreached bool
}

// checkProfile asks the automator whether it accepts the profile of cfg (a
// valid config): reachable, its certificate signed by ca_cert, the token
// accepted and current, the current key held. It authenticates with a
// Complete that names no unit, which the automator refuses as malformed
// once the token is accepted, and which claims, records and writes
// nothing: a stopped standby checked does not appear as a polling
// instance. It takes at most checkTimeout.
func checkProfile(ctx context.Context, cfg config.Config, now time.Time) profileCheck {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if addr, _, err := cfg.Target(); err == nil {
		// gRPC would say "produced zero addresses" of a name that does
		// not resolve, or wait out the bound for a web proxy's.
		if err := resolveProblem(ctx, checkResolver, os.Getenv, addr); err != nil {
			return profileCheck{unreached: true, line: fmt.Sprintf("not reached: %v: check it and this machine's DNS", err)}
		}
	}
	conn, err := Dial(cfg)
	if err != nil {
		return profileCheck{line: fmt.Sprintf("not checked: %v", err)}
	}
	defer conn.Close()
	var trailer metadata.MD
	ctx = metadata.AppendToOutgoingContext(ctx, grpcwire.HeaderStatusCheck, "1")
	_, err = automatorv1.NewProxyServiceClient(conn).Complete(ctx, &automatorv1.CompleteRequest{}, grpc.Trailer(&trailer))
	if agent.PlaintextClosed(cfg.AutomatorURL, err) {
		// Closed without a word: an automator serving TLS, or something
		// else on the port (a relay without a backend), which a TLS
		// handshake tells apart.
		if u, perr := url.Parse(cfg.AutomatorURL); perr == nil && answersTLS(ctx, u.Host) {
			return profileCheck{stale: true, refused: true, line: fmt.Sprintf("the automator at %s serves TLS, and closes the plaintext connections an http:// automator_url makes without answering: give automator_url as https://%s with the profile's ca_cert; install the account's current profile", u.Host, u.Host)}
		}
	}
	return judgeCheck(cfg, err, trailer, now)
}

// answersTLS reports whether what listens at addr (HOST:PORT) answers a
// TLS handshake: it completes, or fails for the certificate (which need
// not be trusted here: nothing is sent over it) or with an alert the
// other side sent. A connection closed, reset or answered in anything but
// TLS does not.
func answersTLS(ctx context.Context, addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	d := tls.Dialer{Config: &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return true
	}
	// An alert received over TCP is a net.OpError of Op "remote error".
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	return errors.As(err, &verify) || (errors.As(err, &op) && op.Op == "remote error")
}

// judgeCheck reads the answer to checkProfile's call.
func judgeCheck(cfg config.Config, err error, trailer metadata.MD, now time.Time) profileCheck {
	st := status.Convert(err)
	switch st.Code() {
	case codes.InvalidArgument:
		// Authenticated, then refused for naming no unit: the token is
		// accepted.
	case codes.Unauthenticated:
		return profileCheck{stale: true, refused: true, line: fmt.Sprintf("token refused (%s): the account's token was rotated and its overlap has ended, or the account was deleted; install the account's current profile", st.Message())}
	case codes.ResourceExhausted:
		// Only a credential found wrong spends the address's budget of
		// failures: a valid token is never refused so.
		return profileCheck{stale: true, refused: true, line: fmt.Sprintf("token refused, and this address is over its budget of failed authentications (%s); install the account's current profile", st.Message())}
	case codes.Unavailable, codes.DeadlineExceeded:
		msg := st.Message()
		// As the agent's log tells them apart (agent.connState): a
		// handshake the automator answered with a certificate this config
		// does not trust, or one the network cut (EOF, a reset), which
		// names no certificate and says nothing of the profile.
		if strings.Contains(msg, "authentication handshake failed") && agent.CertTime(msg) {
			// Its dates, at this host's time: the clock, not the profile
			// (a re-review).
			return profileCheck{unreached: true, line: fmt.Sprintf("not reached: %s (%s)", agent.CertTimeHelp, msg)}
		}
		if strings.Contains(msg, "authentication handshake failed") && strings.Contains(msg, "certificate") {
			return profileCheck{stale: true, refused: true, line: fmt.Sprintf("the automator's certificate is not trusted by this config (ca_cert, pin_sha256): %s; install the account's current profile", msg)}
		}
		if agent.NotTLS(err) {
			return profileCheck{unreached: true, line: fmt.Sprintf("not reached: %s (%s)", agent.NotTLSHelp, msg)}
		}
		if st.Code() == codes.DeadlineExceeded && strings.Contains(msg, "while waiting for connections to become ready") {
			// gRPC's words for a connection never set up in time.
			return profileCheck{unreached: true, line: fmt.Sprintf("not reached within %v: no connection to %s was set up in that time: nothing answered (its host down, or packets dropped on the way), or its TLS handshake was not answered", checkTimeout, cfg.AutomatorURL)}
		}
		return profileCheck{unreached: true, line: fmt.Sprintf("not reached within %v: %s", checkTimeout, msg)}
	case codes.OK:
		return profileCheck{line: "answered a check that names no unit: not an automator this proxy knows"}
	default:
		return profileCheck{line: fmt.Sprintf("not checked: %s: %s", st.Code(), st.Message())}
	}
	held, _ := cfg.Keys() // valid
	if id, ok := wrongKey(held, trailer.Get(grpcwire.TrailerKeyCheck)); ok {
		return profileCheck{stale: true, refused: true, line: fmt.Sprintf("token accepted, but this config's key %d is not the account's key %d (another account's key, or a mistyped one): the automator refuses its polls; install the account's current profile", id, id)}
	}
	var problems []string
	if v := trailer.Get(grpcwire.TrailerTokenUntil); len(v) > 0 {
		if until, err := time.Parse(time.RFC3339Nano, v[0]); err == nil {
			problems = append(problems, fmt.Sprintf("its token is a previous one, refused from %s (in %v)", until.UTC().Format(time.RFC3339), ago(until, now)))
		}
	}
	current := " (this automator does not say whether the token and key are current: an older release)"
	if v := trailer.Get(grpcwire.TrailerKeyID); len(v) > 0 {
		current = ", current key " + v[0] + " held"
		if id, err := strconv.ParseUint(v[0], 10, 32); err == nil && !slices.Contains(held.IDs(), uint32(id)) {
			problems = append(problems, fmt.Sprintf("it lacks the account's current key %d (it holds %v)", id, held.IDs()))
		}
	}
	if len(problems) > 0 {
		return profileCheck{stale: true, line: "token accepted, but the config predates a rotation: " + strings.Join(problems, "; ") + "; install the account's current profile"}
	}
	return profileCheck{line: fmt.Sprintf("reached %s, token accepted%s", cfg.AutomatorURL, current)}
}

// wrongKey returns the id of a key held whose check is not the one the
// automator gave for the account's key of that id (grpcwire.TrailerKeyCheck,
// "ID:CHECK"); false when every key held that the account has matches, or
// the automator gave no checks (an older release). A check that does not
// parse is passed over.
func wrongKey(held crypto.Keys, checks []string) (uint32, bool) {
	for _, c := range checks {
		idText, check, ok := strings.Cut(c, ":")
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(idText, 10, 32)
		if err != nil {
			continue
		}
		want, err := base64.RawStdEncoding.DecodeString(check)
		if err != nil {
			continue
		}
		if k, ok := held.Key(uint32(id)); ok && !crypto.KeyCheckEqual(crypto.KeyCheck(k), want) {
			return uint32(id), true
		}
	}
	return 0, false
}
