package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"

	"golang.org/x/net/http/httpproxy"
)

// checkEnvLine says which web-proxy settings status's automator check used:
// this shell's (the check dials as the service does, through grpc-go's
// reading of HTTPS_PROXY and NO_PROXY, or their lower-case forms, from the
// process environment), not the service's, which are what its environment
// file envFile sets ("" where the service has no such file: Windows, whose
// service has an environment of its own). The check cannot take the
// service's settings instead: that reading is made once per process and
// cannot be given other values, and the file is read by systemd's rules or
// sourced by /bin/sh (SysV), which no one parser matches. So it says which
// it used, passwords hidden, and, for each, which way it takes to addr, the
// automator's host:port (route): an HTTPS_PROXY set is not used for a
// loopback address, nor for one NO_PROXY covers.
func checkEnvLine(getenv func(string) string, envFile, addr string) string {
	line := "this shell's (" + dialRoute(getenv, addr) + "), not the service's"
	if envFile == "" {
		return line + ", which is its own (the system's)"
	}
	line += ": it reads " + envFile
	data, err := os.ReadFile(envFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return line + ", which does not exist, so it uses no web proxy"
	case err != nil:
		return line + ", which this user cannot read"
	}
	var set []string
	values := map[string]string{} // the last value set, as the service gets it
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		l = strings.TrimSpace(strings.TrimPrefix(l, "export "))
		name, value, ok := strings.Cut(l, "=")
		value = strings.Trim(value, `"' `)
		if !ok || value == "" {
			continue
		}
		switch name {
		case "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy":
			if _, again := values[name]; !again {
				set = append(set, name)
			}
			values[name] = value
		}
	}
	fileVar := func(k string) string { return values[k] }
	proxyVar, via := firstSet(fileVar, "HTTPS_PROXY", "https_proxy")
	switch {
	case len(set) == 0:
		return line + ", which sets no HTTPS_PROXY or NO_PROXY, so it uses no web proxy"
	case proxyVar == "":
		return line + ", which sets " + strings.Join(set, ", ") + " but no HTTPS_PROXY, so it uses no web proxy"
	}
	line += ", which sets " + strings.Join(set, ", ")
	if addr == "" {
		return line
	}
	noVar, no := firstSet(fileVar, "NO_PROXY", "no_proxy")
	return line + ": " + route(addr, proxyVar, via, noVar, no)
}

// dialRoute says which way a process whose environment getenv reads dials
// addr (host:port, the automator's; "": unsaid): "no HTTPS_PROXY: direct",
// or its web-proxy settings (passwords hidden) and route's verdict. The
// proxy logs it for its own environment, which for a service is the
// service's.
func dialRoute(getenv func(string) string, addr string) string {
	proxyVar, via := firstSet(getenv, "HTTPS_PROXY", "https_proxy")
	if proxyVar == "" {
		return "no HTTPS_PROXY: direct"
	}
	line := proxyVar + "=" + hideUserinfo(via)
	noVar, no := firstSet(getenv, "NO_PROXY", "no_proxy")
	if noVar != "" {
		line += ", " + noVar + "=" + no
	} else {
		line += ", NO_PROXY not set"
	}
	if addr == "" {
		return line
	}
	return line + ": " + route(addr, proxyVar, via, noVar, no)
}

// route says which way a dial to addr (host:port) takes with the web proxy
// proxy (named by the variable proxyVar) and the exclusions noProxy (named
// by noVar, "" when not set), by the rules grpc-go dials by: net/http's
// ProxyFromEnvironment, asked for https://addr, whichever scheme the
// automator's URL has. localhost and loopback addresses are never proxied,
// and a proxy that is not a URL is ignored.
func route(addr, proxyVar, proxy, noVar, noProxy string) string {
	switch {
	case loopback(addr):
		return addr + " directly: a loopback address is never proxied"
	case !proxied(addr, proxy, ""):
		return addr + " directly: " + proxyVar + " is not a URL, and is ignored"
	case !proxied(addr, proxy, noProxy):
		return addr + " directly: " + noVar + " covers it"
	}
	return addr + " through that web proxy"
}

// proxied tells whether a dial to addr goes through the web proxy proxy
// (HTTPS_PROXY's value) with the exclusions noProxy, by net/http's
// ProxyFromEnvironment's rules, which grpc-go dials by.
func proxied(addr, proxy, noProxy string) bool {
	cfg := httpproxy.Config{HTTPSProxy: proxy, NoProxy: noProxy}
	u, err := cfg.ProxyFunc()(&url.URL{Scheme: "https", Host: addr})
	return err == nil && u != nil
}

// dialsDirect tells whether grpc-go, in a process whose environment getenv
// reads, dials addr directly rather than through a web proxy: no
// HTTPS_PROXY, or one that does not apply to addr (route).
func dialsDirect(getenv func(string) string, addr string) bool {
	_, via := firstSet(getenv, "HTTPS_PROXY", "https_proxy")
	_, no := firstSet(getenv, "NO_PROXY", "no_proxy")
	return via == "" || !proxied(addr, via, no)
}

// loopback reports whether addr (host:port) names a loopback host as
// net/http's proxy rules see one: localhost, or a loopback IP address
// (a name that resolves to one is not).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// firstSet returns the first of names set to a value that is not empty,
// and its value.
func firstSet(getenv func(string) string, names ...string) (string, string) {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return n, v
		}
	}
	return "", ""
}

// hideUserinfo hides the user and password of a proxy URL.
func hideUserinfo(v string) string {
	at := strings.LastIndex(v, "@")
	if at < 0 {
		return v
	}
	if s := strings.Index(v, "://"); s >= 0 && s < at {
		return v[:s+3] + "xxxxx" + v[at:]
	}
	return "xxxxx" + v[at:]
}

// dialedName returns the host name that dialling addr (the automator's
// host:port) makes a process whose environment getenv reads resolve, and
// what names it: the web proxy's when the dial goes through one (grpc-go
// leaves the automator's name to it), the automator's otherwise. "" when
// that host is an IP address: nothing is resolved.
func dialedName(getenv func(string) string, addr string) (host, what string) {
	host, _, _ = net.SplitHostPort(addr)
	what = "the host of automator_url"
	if proxyVar, via := firstSet(getenv, "HTTPS_PROXY", "https_proxy"); proxyVar != "" && !loopback(addr) {
		_, no := firstSet(getenv, "NO_PROXY", "no_proxy")
		cfg := httpproxy.Config{HTTPSProxy: via, NoProxy: no}
		if u, err := cfg.ProxyFunc()(&url.URL{Scheme: "https", Host: addr}); err == nil && u != nil {
			host, what = u.Hostname(), "the host of "+proxyVar
		}
	}
	if net.ParseIP(host) != nil {
		return "", ""
	}
	return host, what
}

// resolveProblem says why dialedName's host does not resolve to an address
// with r: its lookup failed (no such host, no answer from the DNS server),
// or found no address. nil when it resolves, or is an IP address.
func resolveProblem(ctx context.Context, r *net.Resolver, getenv func(string) string, addr string) error {
	host, what := dialedName(getenv, addr)
	if host == "" {
		return nil
	}
	addrs, err := r.LookupHost(ctx, host)
	switch {
	case err != nil:
		return fmt.Errorf("%s, %s, does not resolve: %w", what, host, err)
	case len(addrs) == 0:
		return fmt.Errorf("%s, %s, resolves to no address", what, host)
	}
	return nil
}
