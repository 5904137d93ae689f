package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/store"
)

// TestAFailedAuthenticationIsAuditedWhateverItsPath: a request with a
// wrong key is audited with its method and path, cut to 64 bytes. A path
// holding a NUL (%00) or bytes that are not UTF-8, or one cut inside a
// character, is recorded as text every store takes (with U+FFFD for what
// is not text): PostgreSQL refuses those bytes in a text column, and the
// record of the failure would not be written at all.
func TestAFailedAuthenticationIsAuditedWhateverItsPath(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	// "GET /v1/work/" is 13 bytes: the é of the first path straddles the
	// cut at 64.
	paths := []string{
		"/v1/work/" + strings.Repeat("a", 50) + "%C3%A9",
		"/v1/work/w_%00hidden",
		"/v1/work/w_%C3%28",
	}
	for _, path := range paths {
		req, err := http.NewRequest("GET", a.HTTPURL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer oak_not-a-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong key: HTTP %d, want 401", path, resp.StatusCode)
		}
	}
	events, err := a.Store.AuditList(context.Background(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, e := range events {
		if e.Kind == store.AuditAuthFailed {
			failed = append(failed, e.Detail)
			if !utf8.ValidString(e.Detail) || strings.ContainsRune(e.Detail, 0) {
				t.Errorf("a failed authentication is audited with %q: not text PostgreSQL takes (NUL, or not UTF-8)", e.Detail)
			}
		}
	}
	if len(failed) != len(paths) {
		t.Errorf("failed authentications audited: %q; want %d", failed, len(paths))
	}
	for _, want := range []string{"GET /v1/work/" + strings.Repeat("a", 50) + ":", "GET /v1/work/w_\uFFFDhidden:", "GET /v1/work/w_\uFFFD(:"} {
		found := false
		for _, d := range failed {
			found = found || strings.HasPrefix(d, want)
		}
		if !found {
			t.Errorf("no failed authentication audited as %q…: %q", want, failed)
		}
	}
}
