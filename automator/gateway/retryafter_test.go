package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/server"
)

// TestTryAgainLaterHasRetryAfter: a 429 that a later call may get past
// says when in Retry-After (RFC 9110 10.2.3), in whole seconds: the
// account's queue at its cap (1), and the failed-authentication budget of
// the address (the time until it may fail once more, here up to the
// minute one failure takes to regain). Other answers carry none.
func TestTryAgainLaterHasRetryAfter(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{Limits: server.Limits{MaxQueuedPerAccount: 1, FailedAuthBurst: 1, FailedAuthRefill: time.Minute}})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	cmd := map[string]any{"command": map[string]any{"script": "x"}}
	first := c.do("POST", "/v1/accounts/acme/submit", "", cmd)
	first.want(t, http.StatusOK, "STATE_QUEUED")
	if ra := first.header.Values("Retry-After"); len(ra) != 0 {
		t.Errorf("a 200 has Retry-After %q", ra)
	}
	full := c.do("POST", "/v1/accounts/acme/submit", "", cmd)
	if full.status != http.StatusTooManyRequests || !strings.Contains(full.str("message"), "max_queued_per_account") {
		t.Fatalf("a unit past the queue's cap: HTTP %d %s; want 429", full.status, full.raw)
	}
	if ra := full.header.Values("Retry-After"); len(ra) != 1 || ra[0] != "1" {
		t.Errorf("a unit past the queue's cap: Retry-After %q, want 1", ra)
	}

	// Failed authentications: the first is within the budget (401, no
	// Retry-After: the same key again never helps), the next is not.
	if r := c.do("GET", "/v1/accounts/acme/instances", "oak_wrong", nil); r.status != http.StatusUnauthorized || len(r.header.Values("Retry-After")) != 0 {
		t.Errorf("a wrong key within the budget: HTTP %d, Retry-After %q; want 401 without", r.status, r.header.Values("Retry-After"))
	}
	// (The gateway refuses them before it reads the body, as every call
	// with a wrong key; the queue's 429 above came from the gRPC server.)
	for _, rt := range []struct{ method, path string }{
		{"GET", "/v1/accounts/acme/instances"},
		{"POST", "/v1/accounts/acme/submit"},
		{"GET", "/v1/work/w_0123456789abcdef0123456789abcdef"},
	} {
		var body any
		if rt.method == "POST" {
			body = cmd
		}
		r := c.do(rt.method, rt.path, "oak_wrong", body)
		if r.status != http.StatusTooManyRequests || !strings.Contains(r.str("message"), "too many failed authentications") {
			t.Fatalf("%s %s with a wrong key past the budget: HTTP %d %s; want 429", rt.method, rt.path, r.status, r.raw)
		}
		ra := r.header.Values("Retry-After")
		if n, err := strconv.Atoi(strings.Join(ra, ",")); err != nil || n < 1 || n > 60 {
			t.Errorf("%s %s with a wrong key past the budget: Retry-After %q, want whole seconds from 1 to 60", rt.method, rt.path, ra)
		}
	}
}
