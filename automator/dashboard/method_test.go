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
		{"POST", "/dashboard/work", http.StatusMethodNotAllowed, "GET"},
		{"DELETE", "/dashboard/work/w_0123", http.StatusMethodNotAllowed, "GET"},
		{"PUT", "/dashboard/login", http.StatusMethodNotAllowed, "GET, POST"},
		{"GET", "/dashboard/nothing", http.StatusNotFound, ""},
		{"POST", "/dashboard/nothing", http.StatusNotFound, ""},
	} {
		req, err := http.NewRequest(tc.method, e.url+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: HTTP %d, Allow %q; want %d, Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.code, tc.allow)
		}
		if tc.code == http.StatusMethodNotAllowed && !strings.Contains(string(body), tc.method+" is not allowed on "+tc.path) {
			t.Errorf("%s %s: the page does not say the method is not allowed:\n%.800s", tc.method, tc.path, body)
		}
	}
}
