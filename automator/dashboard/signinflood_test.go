package dashboard_test

import (
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/internal/logtest"
)

// TestRefusedSignInsDoNotWriteALogLinePerAttempt: the sign-in form needs
// no credential to be posted, so its refusals must not cost a log line
// each. A wrong key is a failed authentication, logged as the automator
// logs those (bounded: 20 a minute, then a count) and audited; past the
// address's budget nothing more; an empty form is the visitor's own
// mistake, shown on the page only.
func TestRefusedSignInsDoNotWriteALogLinePerAttempt(t *testing.T) {
	const attempts = 40
	e := newEnv(t)
	log := &logtest.Buffer{}
	logger := slog.New(slog.NewTextHandler(log, nil))
	srv, err := server.New(server.Options{Store: e.st, MasterKey: e.master, PollWindow: pollWindow, Clock: e.clock,
		Limits: server.Limits{FailedAuthBurst: 2, FailedAuthRefill: time.Hour}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	_, base := e.start(replica{srv: srv, opts: func(o *dashboard.Options) { o.Logger = logger }})
	c := client(t)
	for i := range attempts {
		// A wrong key, none, and a key that may not sign in.
		for _, key := range []string{"oak_wrong", "", e.secrets["scoped"]} {
			resp, err := c.PostForm(base+"/dashboard/login", url.Values{"api_key": {key}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Fatalf("sign-in %d with key %q: %d; want a refusal", i, key, resp.StatusCode)
			}
		}
	}
	// Two within the budget, one as the address goes over it.
	if n := strings.Count(log.String(), "authentication failed") + strings.Count(log.String(), "too many failed authentications"); n != 3 {
		t.Errorf("%d lines of failed authentications, want 3", n)
	}
	if n := strings.Count(log.String(), "sign-in refused"); n != 0 {
		t.Errorf("%d refused sign-ins wrote %d lines of their own; want none (the automator's bounded line covers them)", 3*attempts, n)
	}
	// The scoped key's, as a call outside its key's scope: a line each
	// until the bound.
	if n := strings.Count(log.String(), "API key may not sign in to the dashboard"); n < 1 || n >= attempts {
		t.Errorf("%d lines for %d sign-ins with a scoped key; want at least one, and fewer", n, attempts)
	}
}
