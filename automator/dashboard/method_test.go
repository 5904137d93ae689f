package dashboard_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestWrongMethodIsMethodNotAllowed: a page asked for with a method it
// does not take (a GET of the sign-out, typed in the address bar; a POST
// of a listing) is 405 naming the method it takes, not "no such page";
// a path that is no page stays 404.
func TestWrongMethodIsMethodNotAllowed(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	e.signIn(c, e.url, "admin")
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"GET", "/dashboard/logout", http.StatusMethodNotAllowed, "POST"},
		{"POST", "/dashboard/work", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"DELETE", "/dashboard/work/w_0123", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"PUT", "/dashboard/login", http.StatusMethodNotAllowed, "GET, HEAD, POST"},
		{"GET", "/dashboard/nothing", http.StatusNotFound, ""},
		{"POST", "/dashboard/nothing", http.StatusNotFound, ""},
	} {
		resp, body := send(t, c, tc.method, e.url+tc.path)
		if resp.StatusCode != tc.code || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: HTTP %d, Allow %q; want %d, Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.code, tc.allow)
		}
		if tc.code == http.StatusMethodNotAllowed && !strings.Contains(body, tc.method+" is not allowed on &#34;"+tc.path+"&#34;") {
			t.Errorf("%s %s: the page does not say the method is not allowed:\n%.800s", tc.method, tc.path, body)
		}
	}
}

// TestAWrongMethodOnACraftedPathQuotesItCut: the path a 405 names is
// quoted, and no more than its first 80 bytes with its length, as a 404
// quotes an id (and so is a method longer than that): a crafted URL's kilobytes, or a bidi override or line
// break percent-encoded in it, do not come back as they are.
func TestAWrongMethodOnACraftedPathQuotesItCut(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	e.signIn(c, e.url, "admin")
	for _, tc := range []struct{ method, path, want, not string }{
		{"POST", "/dashboard/work/w_" + strings.Repeat("x", 7000), "POST is not allowed on &#34;/dashboard/work/w_xxx", strings.Repeat("x", 100)},
		{"POST", "/dashboard/work/w_%E2%80%AEevil%0Aline", `POST is not allowed on &#34;/dashboard/work/w_\u202eevil\nline&#34;`, "\u202e"},
		{strings.Repeat("M", 7000), "/dashboard/work", "&#34;MMM", strings.Repeat("M", 100)},
	} {
		resp, body := send(t, c, tc.method, e.url+tc.path)
		if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(body, tc.want) || strings.Contains(body, tc.not) {
			t.Errorf("%.10s %.40s…: HTTP %d; want 405 saying %s, without %q:\n%.1200s", tc.method, tc.path, resp.StatusCode, tc.want, tc.not, body)
		}
	}
}

// send makes a request of method to url with c, without a body, and
// returns its response, closed, and its body.
func send(t *testing.T, c *http.Client, method, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}
