package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// Config configures a Client. Only Addresses and APIKey (and a CA for
// https) are required; the rest have defaults.
type Config struct {
	// Addresses are the automators to call, each "https://HOST:PORT" (or
	// "http://HOST:PORT" for an automator serving plaintext on loopback:
	// HOST is then localhost or a loopback address).
	// With several, replicas sharing one database, a call that finds one
	// unavailable moves on to the next.
	Addresses []string
	// APIKey authenticates the caller; it is sent as
	// "authorization: Bearer <key>" on every call.
	APIKey string
	// CAPEM is the automator's CA certificate (ca.pem in its data
	// directory). The client trusts exactly this CA, never the system's.
	CAPEM []byte
	// CAFile names a file holding the CA certificate, read by New when
	// CAPEM is empty.
	CAFile string
	// ServerName is the name the automator's certificate is checked
	// against; by default each address's host.
	ServerName string
	// RetryFor bounds how long a call keeps retrying while no automator
	// answers (1 minute), counted from the first failure since one last
	// answered. A wait for a unit retries at least until RetryFor after
	// the unit's deadline, when its outcome is known for sure.
	RetryFor time.Duration
	// OnUnreachable, when set, is told once a call has tried every
	// address and could connect to none (its connections refused; or
	// accepted, then closed with nothing sent, as by a load balancer
	// without a backend; or answered by something not an automator; or
	// refused by TLS), or none that answered (hung: a connection
	// accepted, then nothing sent within its bound, as from a stopped
	// process, or a call unanswered, as one stuck in the automator), and
	// goes on trying: once per call
	// (ExecuteOnProxy's wait and the cancel that follows it are one),
	// and again after an automator answered it (a wait resumed), so
	// that a command can say at once what it waits for rather than
	// retrying silently until RetryFor ends. It is called on the
	// calling goroutine, between tries; of a try unanswered over a
	// connection nothing came over since it began, once a probe on the
	// connection has told whether the automator is there (up to 2 s
	// later: KindCallStuck, KindCallUnanswered).
	OnUnreachable func(Unreachable)
	// Dial opens the connections, when set (a proxy, a test relay). By
	// default the address is dialled directly over TCP; a host name that
	// resolves to several addresses has them raced, each next one dialled
	// 250 ms after the last began (at once when one fails) and the first
	// that connects kept, so that a black-holed one does not hold a
	// connection up (RFC 8305). A plaintext
	// (http://) connection it opens must end at a loopback TCP address or
	// a unix socket: any other is closed before anything is sent on it.
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	// reconnectWait, when set (a test), is gRPC's least and greatest wait
	// between connection attempts, in place of reconnect's.
	reconnectWait time.Duration
	// retryPause, when set (a test), is a call's pause between two rounds
	// of tries, in place of 50 ms doubling to 2 s.
	retryPause time.Duration
}

const defaultRetryFor = time.Minute

// Unreachable is what Config.OnUnreachable is told: the last address a
// call could not connect to, or that did not answer, why (the dial's
// error, "connection refused", say; that what accepted the connection
// closed it without answering, or is not an automator, by what it sent;
// the TLS error; or how long nothing came), which of these it is (Kind),
// what the call does and when it stops trying (RetryFor, or the context's
// deadline when that is sooner) unless an automator answers first.
type Unreachable struct {
	Address string
	Err     error
	// Kind tells which way the address failed the call.
	Kind UnreachableKind
	// Hung tells that the address accepted the connection but did not
	// answer in time (Kind is KindSilent, KindCallStuck or
	// KindCallUnanswered): a connection's setup (the TLS handshake's 5 s,
	// gRPC's 20 s), the keepalive's 20 s of silence, or the bound of the
	// try's answer. An automator that resumes is reached by the tries
	// that go on.
	Hung bool
	// Doing is what the call does: "waiting for work w_...",
	// "submitting work to account \"acme\"".
	Doing string
	Until time.Time
}

// UnreachableKind is which way an address failed a call (Unreachable.Kind).
type UnreachableKind int

const (
	// KindNotConnected: the connection could not be made (refused, no
	// route, a name that does not resolve); Err is the dial's error.
	KindNotConnected UnreachableKind = iota + 1
	// KindClosed: what accepted the connection closed or reset it with
	// nothing sent, or after its TLS handshake with nothing more: a load
	// balancer or a relay without a backend, another program on the
	// port, or, given as http://, an automator serving TLS.
	KindClosed
	// KindNotAnAutomator: what answered sent what no automator sends (an
	// HTTP/1 status line, which Err quotes; plaintext HTTP/2 for
	// https://, TLS for http://).
	KindNotAnAutomator
	// KindTLS: TLS failed before an automator answered: the server ended
	// it with an alert (it wants a client certificate, speaks no HTTP/2:
	// a TLS server that is not the automator, or a proxy in front of it)
	// or its certificate does not verify. Err is the TLS error.
	KindTLS
	// KindSilent (Hung): a connection was given up with nothing coming
	// over it in its time, its setup's or the keepalive's (a ping
	// unanswered): the automator's process stopped or frozen, or its
	// packets dropped.
	KindSilent
	// KindCallStuck (Hung): the try's answer did not begin within its
	// bound, though the connection answered meanwhile (a ping, another
	// call) or answered a probe sent on it then (a health check, given
	// 2 s): the automator is there, the call is stuck in it (waiting on
	// its database, say).
	KindCallStuck
	// KindCallUnanswered (Hung): the try's answer did not begin within
	// its bound, and nothing else came over the connection meanwhile,
	// nor in answer to the probe sent on it then within its 2 s: the
	// automator's process stopped or frozen, or its packets dropped (or a
	// link with a round trip longer than the probe's bound).
	KindCallUnanswered
	// KindDatabaseUnreachable: the automator answered, UNAVAILABLE, that
	// its database does not answer (a replica cut off from PostgreSQL,
	// PostgreSQL down); Err is its answer. Another replica, or this one
	// once the database is back, serves the call.
	KindDatabaseUnreachable
)

func (k UnreachableKind) String() string {
	switch k {
	case KindNotConnected:
		return "not connected"
	case KindClosed:
		return "closed unanswered"
	case KindNotAnAutomator:
		return "not an automator"
	case KindTLS:
		return "TLS failed"
	case KindSilent:
		return "silent"
	case KindCallStuck:
		return "call stuck"
	case KindCallUnanswered:
		return "call unanswered"
	case KindDatabaseUnreachable:
		return "database unreachable"
	}
	return fmt.Sprintf("UnreachableKind(%d)", int(k))
}

// hung tells whether the address accepted the connection but did not
// answer in time (Unreachable.Hung).
func (k UnreachableKind) hung() bool {
	return k == KindSilent || k == KindCallStuck || k == KindCallUnanswered
}

// target is one parsed address.
type target struct {
	url       string // as given, for messages
	hostPort  string
	host      string
	plaintext bool
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if len(c.Addresses) == 0 {
		errs = append(errs, errors.New("no Addresses: give at least one automator address (https://HOST:PORT)"))
	}
	tlsNeeded := false
	for i, a := range c.Addresses {
		t, err := parseAddress(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("bad Addresses[%d]: %w", i, err))
			continue
		}
		tlsNeeded = tlsNeeded || !t.plaintext
	}
	if c.APIKey == "" {
		errs = append(errs, errors.New("no APIKey: the API key is required"))
	} else if i := strings.IndexFunc(c.APIKey, func(r rune) bool { return r < 0x21 || r > 0x7e }); i >= 0 {
		// It goes in a header ("authorization: Bearer KEY"), which
		// holds printable ASCII only: every call would fail Internal.
		what := fmt.Sprintf("the character %U at byte %d", []rune(c.APIKey[i:])[0], i)
		if strings.TrimSpace(c.APIKey) != c.APIKey {
			what = "a space or line break around it (a key read from a file ends in one: trim it, strings.TrimSpace)"
		}
		errs = append(errs, fmt.Errorf("APIKey holds %s; a key is printable ASCII only", what))
	}
	if tlsNeeded && len(c.CAPEM) == 0 && c.CAFile == "" {
		errs = append(errs, errors.New("no CAPEM or CAFile: the automator's CA certificate is required for https addresses"))
	}
	if c.RetryFor < 0 {
		errs = append(errs, fmt.Errorf("RetryFor: %v is negative", c.RetryFor))
	}
	return errors.Join(errs...)
}

func parseAddress(a string) (target, error) {
	u, err := url.Parse(a)
	if err != nil || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return target{}, fmt.Errorf("%q must be https://HOST:PORT", a)
	}
	switch u.Scheme {
	case "https":
		return target{url: a, hostPort: u.Host, host: u.Hostname()}, nil
	case "http":
		// An automator serves plaintext on loopback only: elsewhere the
		// API key would cross a network in clear, to whatever answers.
		if h := u.Hostname(); h != "localhost" && !isLoopbackIP(h) {
			return target{}, fmt.Errorf("%q: http:// is for an automator serving plaintext on loopback only (localhost, 127.0.0.1, ::1); give https://%s", a, u.Host)
		}
		return target{url: a, hostPort: u.Host, host: u.Hostname(), plaintext: true}, nil
	}
	return target{}, fmt.Errorf("%q must be https://HOST:PORT (or http:// for a plaintext automator on loopback)", a)
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Config) caPEM() ([]byte, error) {
	if len(c.CAPEM) > 0 || c.CAFile == "" {
		return c.CAPEM, nil
	}
	b, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificate: %w", err)
	}
	return b, nil
}
