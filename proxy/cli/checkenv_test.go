package cli

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckEnvLineNamesTheShellsSettingsAndTheServiceFile: status's
// automator check dials with the shell's web-proxy variables (HTTPS_PROXY,
// NO_PROXY), not the service's, which come from its environment file: the
// line says which it used, with any password in them hidden, and what the
// service's file sets, so a check that reached the automator through the
// shell's proxy is not taken for the service's way out.
func TestCheckEnvLineNamesTheShellsSettingsAndTheServiceFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	envFile := filepath.Join(dir, "proxy")
	shell := map[string]string{"HTTPS_PROXY": "http://alice:secret@shellproxy.example:3128"}
	getenv := func(k string) string { return shell[k] }

	if err := os.WriteFile(envFile, []byte("# the way out\nexport https_proxy=\"http://webproxy.example:3128\"\nNO_PROXY=.corp.example\nTZ=UTC\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	line := checkEnvLine(getenv, envFile, "automator.example:8443")
	for _, want := range []string{"this shell's", "HTTPS_PROXY=http://xxxxx@shellproxy.example:3128", "NO_PROXY not set", "not the service's", envFile, "sets https_proxy, NO_PROXY"} {
		if !strings.Contains(line, want) {
			t.Errorf("check env = %q, want it to say %q", line, want)
		}
	}
	if strings.Contains(line, "secret") || strings.Contains(line, "TZ") {
		t.Errorf("check env = %q: it shows the proxy's password or a variable that is no web proxy's", line)
	}

	if err := os.WriteFile(envFile, []byte("TZ=UTC\nHTTPS_PROXY=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if line := checkEnvLine(getenv, envFile, "automator.example:8443"); !strings.Contains(line, "sets no HTTPS_PROXY or NO_PROXY, so it uses no web proxy") {
		t.Errorf("check env with a file setting no proxy = %q", line)
	}

	delete(shell, "HTTPS_PROXY")
	missing := filepath.Join(dir, "none")
	if line := checkEnvLine(getenv, missing, "automator.example:8443"); !strings.Contains(line, "this shell's (no HTTPS_PROXY: direct)") || !strings.Contains(line, missing+", which does not exist, so it uses no web proxy") {
		t.Errorf("check env with no proxy anywhere = %q", line)
	}

	if line := checkEnvLine(getenv, "", "automator.example:8443"); !strings.Contains(line, "not the service's, which is its own") {
		t.Errorf("check env of a service with no environment file (Windows) = %q", line)
	}
}

// TestCheckEnvLineSaysWhetherTheAutomatorIsReachedThroughTheWebProxy: the
// line names the way the check took to the config's automator, by the
// rules grpc-go dials by (net/http's ProxyFromEnvironment for an https
// URL of the address): an HTTPS_PROXY set does not mean it was used, since
// a loopback address (localhost, 127.0.0.0/8, ::1) is never proxied, nor
// one NO_PROXY covers; the same for what the service's file sets.
func TestCheckEnvLineSaysWhetherTheAutomatorIsReachedThroughTheWebProxy(t *testing.T) {
	t.Parallel()
	envFile := filepath.Join(t.TempDir(), "proxy")
	if err := os.WriteFile(envFile, []byte("HTTPS_PROXY='http://webproxy.example:3128'\nexport NO_PROXY=\".corp.example\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shell := map[string]string{"https_proxy": "http://shellproxy.example:3128", "no_proxy": "internal.example"}
	getenv := func(k string) string { return shell[k] }
	for _, c := range []struct{ addr, shell, file string }{
		{"automator.example:8443", "automator.example:8443 through that web proxy", "automator.example:8443 through that web proxy"},
		{"127.0.0.1:8443", "127.0.0.1:8443 directly: a loopback address is never proxied", "127.0.0.1:8443 directly: a loopback address is never proxied"},
		{"localhost:8443", "localhost:8443 directly: a loopback address is never proxied", "localhost:8443 directly: a loopback address is never proxied"},
		{"[::1]:8443", "[::1]:8443 directly: a loopback address is never proxied", "[::1]:8443 directly: a loopback address is never proxied"},
		{"a.internal.example:8443", "a.internal.example:8443 directly: no_proxy covers it", "a.internal.example:8443 through that web proxy"},
		{"a.corp.example:8443", "a.corp.example:8443 through that web proxy", "a.corp.example:8443 directly: NO_PROXY covers it"},
	} {
		line := checkEnvLine(getenv, envFile, c.addr)
		shellPart, filePart, ok := strings.Cut(line, "not the service's")
		if !ok || !strings.Contains(shellPart, "https_proxy=http://shellproxy.example:3128, no_proxy=internal.example: "+c.shell+")") ||
			!strings.Contains(filePart, "which sets HTTPS_PROXY, NO_PROXY: "+c.file) {
			t.Errorf("check env for %s = %q\nwant this shell's: %q, the service's: %q", c.addr, line, c.shell, c.file)
		}
	}

	// An HTTPS_PROXY that is not a URL is ignored: the dial is direct.
	shell["https_proxy"] = "http://%zz:3128"
	if line := checkEnvLine(getenv, envFile, "automator.example:8443"); !strings.Contains(line, "automator.example:8443 directly: https_proxy is not a URL, and is ignored)") {
		t.Errorf("check env with a broken https_proxy = %q", line)
	}
}

// TestDialedNameIsTheWebProxysWhenTheDialGoesThroughOne: the name this
// machine resolves to reach the automator is the web proxy's when grpc-go
// dials through one (the automator's name is then the web proxy's to
// resolve), the automator's otherwise; an IP address is no name at all.
func TestDialedNameIsTheWebProxysWhenTheDialGoesThroughOne(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HTTPS_PROXY": "http://user:secret@webproxy.example:3128", "no_proxy": "internal.example"}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct{ addr, host, what string }{
		{"automator.example:8443", "webproxy.example", "the host of HTTPS_PROXY"},
		{"a.internal.example:8443", "a.internal.example", "the host of automator_url"},
		{"localhost:8443", "localhost", "the host of automator_url"},
		{"192.0.2.7:8443", "webproxy.example", "the host of HTTPS_PROXY"},
		{"127.0.0.1:8443", "", ""},
	} {
		if host, what := dialedName(getenv, c.addr); host != c.host || what != c.what {
			t.Errorf("dialedName(%s) = %q, %q; want %q, %q", c.addr, host, what, c.host, c.what)
		}
	}
	env["HTTPS_PROXY"] = "http://192.0.2.9:3128"
	if host, what := dialedName(getenv, "automator.example:8443"); host != "" {
		t.Errorf("through a web proxy given by address: %q, %q; want nothing to resolve", host, what)
	}
	delete(env, "HTTPS_PROXY")
	if host, what := dialedName(getenv, "automator.example:8443"); host != "automator.example" || what != "the host of automator_url" {
		t.Errorf("without a web proxy: %q, %q; want the automator's host", host, what)
	}
}

// noDNS is a resolver that asks no DNS server: it reads the hosts file,
// and a name not in it fails to resolve.
var noDNS = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no DNS server in this test")
}}

// TestResolveProblemNamesTheNameThatDoesNotResolve: the error names what
// the name is (whose host), the name, and the lookup's own error; a name
// that resolves, or an address, is no problem.
func TestResolveProblemNamesTheNameThatDoesNotResolve(t *testing.T) {
	t.Parallel()
	getenv := func(string) string { return "" }
	err := resolveProblem(t.Context(), noDNS, getenv, "automator.invalid:8443")
	if err == nil || !strings.HasPrefix(err.Error(), "the host of automator_url, automator.invalid, does not resolve: lookup automator.invalid") ||
		!strings.Contains(err.Error(), "no DNS server in this test") {
		t.Errorf("resolveProblem of a name that does not resolve = %v", err)
	}
	for _, addr := range []string{"localhost:8443", "127.0.0.1:8443", "[::1]:8443"} {
		if err := resolveProblem(t.Context(), noDNS, getenv, addr); err != nil {
			t.Errorf("resolveProblem(%s) = %v; want nil", addr, err)
		}
	}
}

// TestDialsDirectAsGRPCDoes: the proxy dials with its own dialer (a SYN
// every second, grpcwire.FastSYNDial) exactly where grpc-go would dial
// directly, since grpc-go goes through no web proxy with a dialer given:
// with no HTTPS_PROXY (or https_proxy), or one NO_PROXY exempts the
// automator from, one that is not a URL, or a loopback automator; not
// where a web proxy applies.
func TestDialsDirectAsGRPCDoes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env    map[string]string
		addr   string
		direct bool
	}{
		{nil, "automator.example:8443", true},
		{map[string]string{"HTTPS_PROXY": "http://webproxy:3128"}, "automator.example:8443", false},
		{map[string]string{"https_proxy": "http://webproxy:3128"}, "automator.example:8443", false},
		{map[string]string{"HTTPS_PROXY": "http://webproxy:3128", "NO_PROXY": ".example"}, "automator.example:8443", true},
		{map[string]string{"HTTPS_PROXY": "http://webproxy:3128", "no_proxy": "automator.example"}, "automator.example:8443", true},
		{map[string]string{"HTTPS_PROXY": "http://webproxy:3128", "NO_PROXY": "other.example"}, "automator.example:8443", false},
		{map[string]string{"HTTPS_PROXY": "http://webproxy:3128"}, "127.0.0.1:8443", true},
		{map[string]string{"HTTP_PROXY": "http://webproxy:3128"}, "automator.example:8443", true},
	} {
		if got := dialsDirect(func(k string) string { return tc.env[k] }, tc.addr); got != tc.direct {
			t.Errorf("%v, %s: dials directly %v, want %v", tc.env, tc.addr, got, tc.direct)
		}
	}
}
