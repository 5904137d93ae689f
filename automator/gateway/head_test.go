package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

// head sends a HEAD request over a connection of its own and returns the
// answer's status line, its header and every byte the server sent after
// it (none, for a HEAD: RFC 9110 9.3.2).
func head(t *testing.T, a *automatortest.Automator, path, auth string) (int, http.Header, []byte) {
	t.Helper()
	ctx := waittest.Context(t, "HEAD "+path+" to answer")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(a.HTTPURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := "HEAD " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
	if auth != "" {
		req += "Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
	if err != nil {
		t.Fatalf("HEAD %s: %v", path, err)
	}
	// Connection: close: whatever follows the header up to the end of the
	// connection would be a body.
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("HEAD %s: reading past the header: %v", path, err)
	}
	return resp.StatusCode, resp.Header, rest
}

// TestHeadOfAGetRouteAnswersAsGetWithoutABody: HEAD of each GET route of
// the API answers with the status and header of GET and no body (RFC 9110
// 9.3.2), authenticated as GET is; a HEAD of a POST route is 405, runs
// nothing, and a HEAD of a unit's :wait does not wait.
func TestHeadOfAGetRouteAnswersAsGetWithoutABody(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	// No proxy: the unit stays queued until cancelled; once cancelled its
	// answer no longer changes (remaining is null), so GET and HEAD can be
	// compared byte count for byte count.
	queued := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}})
	queued.want(t, http.StatusOK, "STATE_QUEUED")
	cancelled := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}})
	c.do("POST", "/v1/work/"+cancelled.str("work_id")+":cancel", "", nil).want(t, http.StatusOK, "STATE_CANCELLED")

	for _, tc := range []struct {
		name, path, key string
		status          int
	}{
		{"a unit", "/v1/work/" + cancelled.str("work_id"), "", http.StatusOK},
		{"the instances", "/v1/accounts/acme/instances", "", http.StatusOK},
		{"an unknown unit", "/v1/work/w_0123456789abcdef0123456789abcdef", "", http.StatusNotFound},
		{"an unknown account", "/v1/accounts/nobody/instances", "", http.StatusNotFound},
		{"no key", "/v1/work/" + cancelled.str("work_id"), "-", http.StatusUnauthorized},
		{"the OpenAPI document", "/v1/openapi.json", "-", http.StatusOK},
	} {
		get := c.do("GET", tc.path, tc.key, nil)
		auth := "Bearer " + a.APIKey
		if tc.key == "-" {
			auth = ""
		}
		code, h, rest := head(t, a, tc.path, auth)
		if get.status != tc.status || code != tc.status {
			t.Errorf("%s: GET %d, HEAD %d; want both %d", tc.name, get.status, code, tc.status)
		}
		if len(rest) != 0 {
			t.Errorf("%s: HEAD sent a body: %.100q", tc.name, rest)
		}
		for _, k := range []string{"Content-Type", "Cache-Control", "WWW-Authenticate"} {
			if g, hd := get.header.Values(k), h.Values(k); strings.Join(g, "\n") != strings.Join(hd, "\n") {
				t.Errorf("%s: %s %q for GET, %q for HEAD", tc.name, k, g, hd)
			}
		}
		if cl := h.Get("Content-Length"); cl != "" && cl != get.header.Get("Content-Length") {
			t.Errorf("%s: HEAD's Content-Length %s, GET's %s (%d bytes)", tc.name, cl, get.header.Get("Content-Length"), len(get.raw))
		}
	}

	// HEAD of a POST route: 405 naming the method, Allow without HEAD.
	for _, path := range []string{"/v1/accounts/acme/execute", "/v1/accounts/acme/submit", "/v1/work/" + queued.str("work_id") + ":cancel"} {
		code, h, rest := head(t, a, path, "Bearer "+a.APIKey)
		want, allow := http.StatusMethodNotAllowed, "POST"
		if strings.HasSuffix(path, ":cancel") {
			// A GET of /v1/work/ID:cancel reads the unit "ID:cancel",
			// which does not exist: so does its HEAD.
			want = http.StatusNotFound
		}
		if code != want || len(rest) != 0 || (want == http.StatusMethodNotAllowed && h.Get("Allow") != allow) {
			t.Errorf("HEAD %s: HTTP %d, Allow %q, body %.60q; want %d, Allow %q, no body", path, code, h.Get("Allow"), rest, want, allow)
		}
	}
	// HEAD of :wait reads as GET of the unit "ID:wait" does, at once: it
	// neither waits for the queued unit nor changes it.
	if code, _, _ := head(t, a, "/v1/work/"+queued.str("work_id")+":wait", "Bearer "+a.APIKey); code != http.StatusNotFound {
		t.Errorf("HEAD of :wait: HTTP %d, want 404 as for its GET", code)
	}
	c.do("GET", "/v1/work/"+queued.str("work_id"), "", nil).want(t, http.StatusOK, "STATE_QUEUED")
	if n := a.CountWork(t); n != 2 {
		t.Errorf("%d units after the HEADs, want the 2 submitted", n)
	}
	// A refused HEAD is audited as the HEAD it was.
	events, err := a.Store.AuditList(context.Background(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var heads int
	for _, e := range events {
		if e.Kind == store.AuditAuthFailed && strings.HasPrefix(e.Detail, "HEAD /v1/work/") {
			heads++
		}
	}
	if heads != 1 {
		t.Errorf("%d auth.failed events of HEAD /v1/work/..., want 1", heads)
	}
}
