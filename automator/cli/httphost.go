package cli

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/opsgate/opsgate/automator/config"
)

// hostGuard refuses a request on the HTTP listener whose Host is not a
// name of this automator. The listener is plain HTTP and /metrics (account
// names, queue depths), the OpenAPI document and the dashboard's sign-in
// page need no key: without the check, a web page open in a browser that
// can reach the listener (an operator's, on the automator's host or its
// network) could resolve a name of its own to the listener's address (DNS
// rebinding) and read them as from its own origin. The browser then sends
// that name as Host, which the check does not know.
//
// Known are: IP addresses (a browser connects to those without DNS, so no
// page can rebind one), localhost and *.localhost, this host's name (and
// its first label), the hosts of http_listen and public_url, the names of
// the server certificate in service, and http_allowed_hosts. /healthz and
// /readyz answer every Host: they tell only up or down, and load
// balancers' health checks use whatever name they were given.
type hostGuard struct {
	names    map[string]bool
	suffixes []string // ".example.com" of "*.example.com"
	// cert returns the server certificate in service (nil in plaintext).
	cert func() *x509.Certificate
	log  *slog.Logger

	mu     sync.Mutex
	warned map[string]bool
}

// maxHostWarnings bounds the distinct refused names the log warns of: the
// names come from clients.
const maxHostWarnings = 64

// newHostGuard knows the names of cfg and of this host; cert, when not
// nil, returns the server certificate in service.
func newHostGuard(cfg config.Config, cert func() *x509.Certificate, log *slog.Logger) *hostGuard {
	g := &hostGuard{names: map[string]bool{"localhost": true}, cert: cert, log: log, warned: map[string]bool{}}
	add := func(h string) {
		if h = normalHost(h); h != "" {
			g.names[h] = true
		}
	}
	if name, err := os.Hostname(); err == nil {
		add(name)
		first, _, _ := strings.Cut(name, ".")
		add(first)
	}
	if h, _, err := net.SplitHostPort(cfg.HTTPListen); err == nil {
		add(h)
	}
	if h, err := config.PublicHost(cfg.PublicURL); err == nil {
		add(h)
	}
	for _, h := range cfg.HTTPAllowedHosts {
		if rest, ok := strings.CutPrefix(h, "*."); ok {
			g.suffixes = append(g.suffixes, "."+normalHost(rest))
			continue
		}
		add(h)
	}
	return g
}

// normalHost is h in lower case without a trailing dot or IPv6 brackets.
func normalHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// requestHost is the host of a Host header, without its port.
func requestHost(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return normalHost(h)
	}
	return normalHost(hostport)
}

// allowed tells whether the automator answers to host (without a port).
func (g *hostGuard) allowed(host string) bool {
	if host == "" || net.ParseIP(host) != nil || g.names[host] || strings.HasSuffix(host, ".localhost") {
		// No Host at all is no browser's request (HTTP/1.0 only).
		return true
	}
	for _, s := range g.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	if g.cert != nil {
		if c := g.cert(); c != nil && c.VerifyHostname(host) == nil {
			return true
		}
	}
	return false
}

// wrap refuses, with 403, the requests for a Host the automator does not
// know, except for /healthz and /readyz, and logs each refused name once.
func (g *hostGuard) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := requestHost(r.Host)
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || g.allowed(host) {
			h.ServeHTTP(w, r)
			return
		}
		g.warn(host, r.RemoteAddr)
		if r.ContentLength != 0 {
			// Else the HTTP server would read up to 256 KiB of the body
			// it refused, for as long as the client takes, to keep the
			// connection.
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "host %q is not a name of this automator; if it is one, add it to http_allowed_hosts in %s\n", host, config.FileConfig)
	})
}

func (g *hostGuard) warn(host, source string) {
	g.mu.Lock()
	first := !g.warned[host] && len(g.warned) < maxHostWarnings
	if first {
		g.warned[host] = true
	}
	g.mu.Unlock()
	if first {
		g.log.Warn("refused HTTP requests for a host that is not a name of this automator (a web page rebinding its own name to this address, or a name missing from http_allowed_hosts in "+config.FileConfig+"); logged once per host",
			"host", host, "source", source)
	}
}
