package dashboard_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/dashboard"
)

// behindProxy serves a dashboard behind a reverse proxy that rewrites Host
// to the dashboard's own address, as nginx's proxy_pass does by default.
// The dashboard's PublicURL is publicURL(front), front being the proxy's
// URL. It returns the front and the dashboard's own URL.
func (e *env) behindProxy(publicURL func(front string) string) (front, back string) {
	e.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	front = "http://" + l.Addr().String()
	_, back = e.start(replica{opts: func(o *dashboard.Options) { o.PublicURL = publicURL(front) }})
	target, err := url.Parse(back)
	if err != nil {
		e.t.Fatal(err)
	}
	proxy := httptest.NewUnstartedServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target) // and Host becomes the target's
		r.SetXForwarded()
	}})
	proxy.Listener.Close()
	proxy.Listener = l
	proxy.Start()
	e.t.Cleanup(proxy.Close)
	return front, back
}

// postForm posts a sign-in (or, with no key, a sign-out) form to u with
// the given Origin header and returns the status.
func (e *env) postForm(c *http.Client, u, origin, apiKey string) int {
	e.t.Helper()
	form := url.Values{}
	if apiKey != "" {
		form.Set("api_key", apiKey)
	}
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", origin)
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSignInBehindAReverseProxyThatRewritesHost: behind a reverse proxy
// that rewrites Host, the browser's Origin names the proxy, not the Host
// the automator sees. With the automator's public URL at the proxy's
// origin, sign-in and sign-out from there are accepted; any other origin
// is still refused, and so is the proxy's without a public URL naming it.
func TestSignInBehindAReverseProxyThatRewritesHost(t *testing.T) {
	e := newEnv(t)
	front, _ := e.behindProxy(func(front string) string { return front })
	c := client(t)
	if code := e.postForm(c, front+"/dashboard/login", front, e.secrets["admin"]); code != http.StatusSeeOther {
		t.Fatalf("sign-in through the proxy from its origin, the public URL's: %d, want 303", code)
	}
	if code, _ := get(t, c, front+"/dashboard/"); code != http.StatusOK {
		t.Fatalf("a page through the proxy after signing in: %d, want 200", code)
	}
	for _, origin := range []string{
		"https://evil.example",
		strings.Replace(front, "http://", "https://", 1),                     // another scheme
		"http://localhost:" + strings.TrimPrefix(front, "http://127.0.0.1:"), // another host
	} {
		if code := e.postForm(client(t), front+"/dashboard/login", origin, e.secrets["admin"]); code != http.StatusForbidden {
			t.Errorf("sign-in through the proxy from %s: %d, want 403", origin, code)
		}
		if code := e.postForm(c, front+"/dashboard/logout", origin, ""); code != http.StatusForbidden {
			t.Errorf("sign-out through the proxy from %s: %d, want 403", origin, code)
		}
	}
	if code := e.postForm(c, front+"/dashboard/logout", front, ""); code != http.StatusSeeOther {
		t.Errorf("sign-out through the proxy from its origin: %d, want 303", code)
	}

	// A public URL elsewhere: the proxy's origin is refused.
	other, _ := e.behindProxy(func(string) string { return "https://automator.example:8443" })
	if code := e.postForm(client(t), other+"/dashboard/login", other, e.secrets["admin"]); code != http.StatusForbidden {
		t.Errorf("sign-in through a proxy from an origin that is not the public URL's: %d, want 403", code)
	}
}

// TestPublicURLOriginOmitsTheDefaultPort: a browser leaves the scheme's
// default port out of Origin; a public URL that names it still matches,
// and the same host on another port does not.
func TestPublicURLOriginOmitsTheDefaultPort(t *testing.T) {
	e := newEnv(t)
	_, back := e.start(replica{opts: func(o *dashboard.Options) { o.PublicURL = "https://Automator.Example:443" }})
	for origin, want := range map[string]int{
		"https://automator.example":      http.StatusSeeOther,
		"https://automator.example:8443": http.StatusForbidden,
		"http://automator.example":       http.StatusForbidden,
		"https://automator.example.evil": http.StatusForbidden,
	} {
		if code := e.postForm(client(t), back+"/dashboard/login", origin, e.secrets["admin"]); code != want {
			t.Errorf("sign-in from %s with public URL https://Automator.Example:443: %d, want %d", origin, code, want)
		}
	}
}

// TestSessionCookieIsSecureBehindATLSProxyThatSaysNothingOfIt: behind a
// TLS-terminating reverse proxy that passes the browser's Host on but
// sends no X-Forwarded-Proto (nginx with `proxy_set_header Host $host`
// and nothing more), the browser's Origin says https: the session cookie
// is Secure, so the browser never sends it over plain http. The same
// proxy over plain http gets a cookie that is not.
func TestSessionCookieIsSecureBehindATLSProxyThatSaysNothingOfIt(t *testing.T) {
	e := newEnv(t)
	_, back := e.start(replica{})
	target, err := url.Parse(back)
	if err != nil {
		t.Fatal(err)
	}
	for _, tls := range []bool{true, false} {
		proxy := httptest.NewUnstartedServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		}})
		scheme := "http"
		if tls {
			proxy.StartTLS()
			scheme = "https"
		} else {
			proxy.Start()
		}
		t.Cleanup(proxy.Close)
		form := url.Values{"api_key": {e.secrets["admin"]}}
		req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/dashboard/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", proxy.URL)
		c := proxy.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cs := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || len(cs) != 1 || cs[0].Secure != tls {
			t.Errorf("sign-in through a proxy serving %s: %d, cookies %v; want 303 and one session cookie, Secure: %v", scheme, resp.StatusCode, cs, tls)
		}
	}
}
