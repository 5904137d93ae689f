package dashboard_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const pollWindow = time.Second

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// env is a store with accounts, API keys and units, and a dashboard on it
// served by an httptest server.
type env struct {
	t      testing.TB
	st     store.Store
	path   string // st's SQLite file
	master crypto.MasterKey
	srv    *server.Server
	clock  *clock
	keys   map[string]crypto.Key // account → key
	// API key secrets by id: admin may see commands, viewer may not,
	// scoped is limited to one account.
	secrets map[string]string
	url     string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "automator.db")
	st, err := sqlitestore.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	master, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, path: path, master: master, clock: &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		keys: map[string]crypto.Key{}, secrets: map[string]string{}}
	e.srv, err = server.New(server.Options{Store: st, MasterKey: master, PollWindow: pollWindow, Clock: e.clock,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"acme", "globex"} {
		k, err := crypto.NewKey(1)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := master.SealKey(name, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: name, TokenHash: []byte("t-" + name), KeyID: 1, SealedKey: sealed, Now: e.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		e.keys[name] = k
	}
	for id, accounts := range map[string][]string{"admin": nil, "viewer": nil, "scoped": {"acme"}} {
		secret, err := crypto.NewToken("oak_")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: id, Hash: crypto.HashToken(secret), Name: id, Accounts: accounts, Now: e.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		e.secrets[id] = secret
	}
	e.url = e.serve(master)
	return e
}

// serve starts a dashboard (a replica) with the given master key.
func (e *env) serve(master crypto.MasterKey) string { return e.serveWith(master, e.srv) }

// serveWith starts a dashboard whose server is srv.
func (e *env) serveWith(master crypto.MasterKey, srv *server.Server) string {
	_, u := e.start(replica{st: e.st, srv: srv, master: master})
	return u
}

// replica is how start serves a dashboard: on store st (the env's when
// nil), opening units with srv (the env's when nil), with master key master
// (the env's when zero), its options changed by opts and its listener
// wrapped by listen, when set.
type replica struct {
	st     store.Store
	srv    *server.Server
	master crypto.MasterKey
	opts   func(*dashboard.Options)
	listen func(net.Listener) net.Listener
}

// start starts a dashboard as r says and returns it with its URL.
func (e *env) start(r replica) (*dashboard.Dashboard, string) {
	if r.st == nil {
		r.st = e.st
	}
	if r.srv == nil {
		r.srv = e.srv
	}
	if r.master == (crypto.MasterKey{}) {
		r.master = e.master
	}
	o := dashboard.Options{
		Store: r.st, Opener: r.srv, SignIns: r.srv, MasterKey: r.master, PollWindow: pollWindow, RevealKeys: []string{"admin"},
		Refresh: 10 * time.Millisecond, Keepalive: 30 * time.Millisecond, PageSize: 3,
		Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler),
	}
	if r.opts != nil {
		r.opts(&o)
	}
	d, err := dashboard.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, d.Handler())
	hs := httptest.NewUnstartedServer(mux)
	if r.listen != nil {
		hs.Listener = r.listen(hs.Listener)
	}
	hs.Start()
	e.t.Cleanup(func() { d.Close(); hs.Close() })
	return d, hs.URL
}

func (e *env) seal(account, id string, dir crypto.Direction, m proto.Message) []byte {
	e.t.Helper()
	plain, err := proto.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	blob, err := crypto.Seal(e.keys[account], account, id, dir, plain)
	if err != nil {
		e.t.Fatal(err)
	}
	return blob
}

func (e *env) enqueue(id, account string, queued time.Time, cmd *automatorv1.Command) {
	e.t.Helper()
	if _, err := e.st.WorkEnqueue(e.t.Context(), store.WorkEnqueueParams{ID: id, Account: account, KeyID: 1, Now: queued,
		Deadline: queued.Add(time.Hour), SealedCommand: e.seal(account, id, crypto.DirCommand, cmd)}); err != nil {
		e.t.Fatal(err)
	}
}

// run claims the oldest queued unit of account on instance and completes
// it with res.
func (e *env) run(account, instance string, claimed, finished time.Time, res *automatorv1.Result) {
	e.t.Helper()
	ctx := e.t.Context()
	ws, err := e.st.WorkClaim(ctx, store.WorkClaimParams{Account: account, InstanceID: instance, Max: 1, ClaimIDs: []string{"c"}, Now: claimed})
	if err != nil || len(ws) != 1 {
		e.t.Fatalf("claim: %v %v", ws, err)
	}
	w := ws[0]
	if _, err := e.st.WorkComplete(ctx, store.WorkCompleteParams{ID: w.ID, ClaimID: w.ClaimID, State: store.StateSucceeded,
		SealedResult: e.seal(account, w.ID, crypto.DirResult, res), Now: finished}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) poll(account, instance string, when time.Time) {
	e.t.Helper()
	if err := e.st.InstanceSeen(e.t.Context(), store.InstanceSeenParams{Account: account, InstanceID: instance,
		Hostname: instance + ".example", Version: "v9", Now: when}); err != nil {
		e.t.Fatal(err)
	}
}

// client is a browser: it keeps cookies and does not follow redirects.
func client(t testing.TB) *http.Client {
	t.Helper()
	return &http.Client{
		Jar:           newJar(t),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func newJar(t testing.TB) *cookiejar.Jar {
	t.Helper()
	j, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// signIn posts the sign-in form with API key id and returns the response.
func (e *env) signIn(c *http.Client, base, id string) *http.Response {
	e.t.Helper()
	resp, err := c.PostForm(base+"/dashboard/login", url.Values{"api_key": {e.secrets[id]}, "next": {"/dashboard/work"}})
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// get returns the status and body of a page.
func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusSeeOther {
		return resp.StatusCode, resp.Header.Get("Location")
	}
	return resp.StatusCode, string(body)
}

func TestSignInMakesASessionEveryReplicaAccepts(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	if code, loc := get(t, c, e.url+"/dashboard/"); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/dashboard/login") {
		t.Fatalf("GET /dashboard/ signed out: %d %s, want a redirect to the sign-in form", code, loc)
	}
	resp := e.signIn(c, e.url, "admin")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/work" {
		t.Fatalf("sign-in: %d to %q, want 303 to the page asked for", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		cookie = ck
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/dashboard/" {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/dashboard/", cookie)
	}
	if strings.Contains(cookie.Value, e.secrets["admin"]) {
		t.Fatalf("the session cookie holds the API key itself")
	}
	if cookie.Secure {
		t.Errorf("session cookie over plain http is Secure: a browser would never send it back")
	}
	// Behind a TLS-terminating reverse proxy the cookie is Secure: the
	// browser never sends it over plain http.
	req, _ := http.NewRequest(http.MethodPost, e.url+"/dashboard/login", strings.NewReader(url.Values{"api_key": {e.secrets["admin"]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	if resp, err := client(t).Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if cs := resp.Cookies(); len(cs) != 1 || !cs[0].Secure {
			t.Errorf("sign-in over https (X-Forwarded-Proto): cookies %v, want one Secure session cookie", cs)
		}
	}
	if code, body := get(t, c, e.url+"/dashboard/"); code != http.StatusOK || !strings.Contains(body, `id="signed-in-key">admin<`) {
		t.Fatalf("GET /dashboard/ signed in: %d, want 200 naming key admin:\n%s", code, body)
	}

	// Another replica (same master key) serves the same session; a
	// dashboard with another master key does not.
	other := e.serve(e.master)
	req, _ = http.NewRequest(http.MethodGet, other+"/dashboard/", nil)
	req.AddCookie(cookie)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("replica with the same master key: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	stranger, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	foreign := e.serve(stranger)
	req, _ = http.NewRequest(http.MethodGet, foreign+"/dashboard/", nil)
	req.AddCookie(cookie)
	noFollow := client(t)
	if resp, err := noFollow.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("dashboard with another master key: %v %v, want a redirect to sign in", resp, err)
	} else {
		resp.Body.Close()
	}

	// A tampered cookie, and one past its lifetime, sign the visitor out.
	tampered := *cookie
	tampered.Value = "x" + cookie.Value[1:]
	req, _ = http.NewRequest(http.MethodGet, e.url+"/dashboard/", nil)
	req.AddCookie(&tampered)
	if resp, err := noFollow.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("tampered cookie: %v %v, want a redirect to sign in", resp, err)
	} else {
		resp.Body.Close()
	}
	e.clock.Add(13 * time.Hour)
	if code, _ := get(t, c, e.url+"/dashboard/"); code != http.StatusSeeOther {
		t.Fatalf("after the session's 12 hours: %d, want a redirect to sign in", code)
	}

	// Sign-out clears the cookie.
	e.signIn(c, e.url, "admin")
	resp, err = c.PostForm(e.url+"/dashboard/logout", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, _ := get(t, c, e.url+"/dashboard/"); code != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d, want a redirect to sign in", code)
	}
}

func TestSignInRefusesBadRevokedAndScopedKeys(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	for _, tc := range []struct {
		secret string
		code   int
		want   string
	}{
		{"oak_not-a-key", http.StatusUnauthorized, "That is not a valid API key."},
		{"", http.StatusBadRequest, "Enter an API key."},
		{e.secrets["scoped"], http.StatusForbidden, "may use accounts acme only; the dashboard needs an admin key"},
	} {
		resp, err := c.PostForm(e.url+"/dashboard/login", url.Values{"api_key": {tc.secret}})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) || len(resp.Cookies()) != 0 {
			t.Errorf("sign-in with %q: %d, cookies %v; want %d saying %q", tc.secret, resp.StatusCode, resp.Cookies(), tc.code, tc.want)
		}
	}

	// A form posted from another site, or from an opaque origin (a
	// sandboxed frame, a data: URL), is refused.
	crossPost := func(path, origin string, form url.Values) (int, []*http.Cookie) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Cookies()
	}
	for _, origin := range []string{"https://evil.example", "null"} {
		if code, cookies := crossPost("/dashboard/login", origin, url.Values{"api_key": {e.secrets["admin"]}}); code != http.StatusForbidden || len(cookies) != 0 {
			t.Errorf("sign-in posted from origin %q: %d, cookies %v; want 403 and no session", origin, code, cookies)
		}
	}

	e.signIn(c, e.url, "viewer")
	if code, _ := get(t, c, e.url+"/dashboard/"); code != http.StatusOK {
		t.Fatalf("signed in as viewer: %d", code)
	}
	// Another site cannot sign the user out either: the session stays.
	if code, cookies := crossPost("/dashboard/logout", "https://evil.example", nil); code != http.StatusForbidden || len(cookies) != 0 {
		t.Errorf("sign-out posted from another site: %d, cookies %v; want 403, the cookie left alone", code, cookies)
	}
	if code, _ := get(t, c, e.url+"/dashboard/"); code != http.StatusOK {
		t.Errorf("after a cross-site sign-out: %d, want the session still signed in", code)
	}

	// Revoking the key ends its session at once.
	if _, err := e.st.APIKeyRevoke(t.Context(), store.APIKeyRevokeParams{ID: "viewer", Now: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, c, e.url+"/dashboard/"); code != http.StatusSeeOther {
		t.Errorf("after revoking the key: %d, want a redirect to sign in", code)
	}
	if resp := e.signIn(c, e.url, "viewer"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in with a revoked key: %d, want 403", resp.StatusCode)
	}
}

// TestASessionEndedByARevokeSaysWhyOnTheSignInForm: a page of a session
// whose API key was revoked sends the browser to the sign-in form, which
// then says the session ended because the key was revoked, with the help
// to make a new admin key; the form shown to a browser with no session says
// nothing of the kind.
func TestASessionEndedByARevokeSaysWhyOnTheSignInForm(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	if code, body := get(t, c, e.url+"/dashboard/login"); code != http.StatusOK || strings.Contains(body, "Your session ended") {
		t.Fatalf("sign-in form without a session: %d, says a session ended: %v", code, strings.Contains(body, "Your session ended"))
	}
	e.signIn(c, e.url, "viewer")
	if code, _ := get(t, c, e.url+"/dashboard/"); code != http.StatusOK {
		t.Fatalf("signed in as viewer: %d", code)
	}
	if _, err := e.st.APIKeyRevoke(t.Context(), store.APIKeyRevokeParams{ID: "viewer", Now: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(e.url + "/dashboard/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if resp.StatusCode != http.StatusSeeOther || err != nil || loc.Path != "/dashboard/login" {
		t.Fatalf("a page after the revoke: %d to %v (%v), want a redirect to the sign-in form", resp.StatusCode, loc, err)
	}
	code, body := get(t, c, loc.String())
	const want = "Your session ended: this API key was revoked. To make a new admin key, run automator apikey create admin --all-accounts"
	if code != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("the sign-in form after the revoke: %d, want it to say %q:\n%s", code, want, body)
	}
}

// TestSignInWithARevokedOrWrongKeySaysHowToMakeANewAdminKey: the
// dashboard's refusal of a revoked key names the command that makes a new
// admin key, as the CLI does for a revoked admin.apikey; a wrong key gets
// the same help, and neither names a key, a path or a host.
func TestSignInWithARevokedOrWrongKeySaysHowToMakeANewAdminKey(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	if _, err := e.st.APIKeyRevoke(t.Context(), store.APIKeyRevokeParams{ID: "viewer", Now: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	const help = "To make a new admin key, run automator apikey create admin --all-accounts --data-dir DIR on the automator&#39;s host"
	for _, tc := range []struct {
		what, secret, said string
		code               int
	}{
		{"revoked", e.secrets["viewer"], "This API key was revoked.", http.StatusForbidden},
		{"wrong", "oak_not-a-key", "That is not a valid API key.", http.StatusUnauthorized},
	} {
		resp, err := c.PostForm(e.url+"/dashboard/login", url.Values{"api_key": {tc.secret}})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.said+" "+help) {
			t.Errorf("sign-in with a %s key: %d, body %s; want %d saying %q then %q", tc.what, resp.StatusCode, body, tc.code, tc.said, help)
		}
		if strings.Contains(string(body), "viewer") {
			t.Errorf("sign-in with a %s key names the key's id: %s", tc.what, body)
		}
	}
}

// TestRefusedSignInsAreAuditedAndLimitedLikeRefusedCalls: a sign-in with a
// wrong key is a failed authentication: the audit log records it with the
// address it came from, and past the address's budget the sign-in is
// refused with 429; a valid key still signs in. That sign-in, and the
// sign-out after it, are audited too, naming the key and the address.
func TestRefusedSignInsAreAuditedAndLimitedLikeRefusedCalls(t *testing.T) {
	e := newEnv(t)
	srv, err := server.New(server.Options{Store: e.st, MasterKey: e.master, PollWindow: pollWindow, Clock: e.clock,
		Limits: server.Limits{FailedAuthBurst: 2, FailedAuthRefill: time.Hour}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	base := e.serveWith(e.master, srv)
	c := client(t)
	for i, want := range []int{http.StatusUnauthorized, http.StatusUnauthorized, http.StatusTooManyRequests} {
		resp, err := c.PostForm(base+"/dashboard/login", url.Values{"api_key": {fmt.Sprintf("oak_wrong-%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusTooManyRequests) != strings.Contains(string(body), "Too many failed sign-ins from your address") {
			t.Errorf("wrong key %d: %d; want %d", i, resp.StatusCode, want)
		}
		// The budget regains a failure in an hour: a 429 says when.
		wantRetry := ""
		if want == http.StatusTooManyRequests {
			wantRetry = "3600"
		}
		if ra := resp.Header.Values("Retry-After"); strings.Join(ra, ", ") != wantRetry {
			t.Errorf("wrong key %d: HTTP %d with Retry-After %q; want %q", i, resp.StatusCode, ra, wantRetry)
		}
	}
	// A key that may not sign in (a scoped one) is refused as a call
	// outside its scope is: audited as denied, not as a failure.
	for range 3 {
		resp, err := c.PostForm(base+"/dashboard/login", url.Values{"api_key": {e.secrets["scoped"]}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a scoped key: %d, want 403", resp.StatusCode)
		}
	}
	if resp := e.signIn(c, base, "admin"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a valid key after the budget was spent: %d, want a redirect (signed in)", resp.StatusCode)
	}
	if code := signOut(t, c, base); code != http.StatusSeeOther {
		t.Errorf("sign-out: %d, want a redirect", code)
	}
	events, err := e.st.AuditList(t.Context(), store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, ev := range events {
		if strings.HasPrefix(ev.Detail, "dashboard sign-in: ") && ev.Source == "127.0.0.1" {
			kinds[ev.Kind]++
			// The reason, as for a refused call; the page's help for
			// the visitor is no part of the record (nor of the log).
			if ev.Kind == store.AuditAuthFailed && ev.Detail != "dashboard sign-in: That is not a valid API key." {
				t.Errorf("audit record of a wrong key: %q, want the reason alone", ev.Detail)
			}
			if ev.Kind == store.AuditAuthDenied && (ev.Actor != "apikey:scoped" || !strings.Contains(ev.Detail, "the dashboard needs an admin key")) {
				t.Errorf("audit record of a scoped key: %+v, want it named, and why", ev)
			}
		}
		if (ev.Kind == store.AuditDashboardSignIn || ev.Kind == store.AuditDashboardSignOut) && ev.Actor == "apikey:admin" && ev.Source == "127.0.0.1" {
			kinds[ev.Kind]++
		}
	}
	if kinds[store.AuditDashboardSignIn] != 1 || kinds[store.AuditDashboardSignOut] != 1 {
		t.Errorf("audit log holds %v; want one %s and one %s by apikey:admin from 127.0.0.1", kinds, store.AuditDashboardSignIn, store.AuditDashboardSignOut)
	}
	if kinds[store.AuditAuthFailed] != 2 || kinds[store.AuditAuthRateLimited] != 1 || kinds[store.AuditAuthDenied] != 3 {
		t.Errorf("audit log holds %v of the dashboard's sign-ins from 127.0.0.1; want 2 %s, 1 %s and 3 %s", kinds, store.AuditAuthFailed, store.AuditAuthRateLimited, store.AuditAuthDenied)
	}
}

func TestAccountsPageWarnsOfStrandedWork(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	// acme: one instance that stopped polling ten seconds ago (two poll
	// windows and a second are three) and a queued unit: stranded.
	e.poll("acme", "a-1", now.Add(-10*time.Second))
	e.enqueue("w_1", "acme", now.Add(-90*time.Second), &automatorv1.Command{Script: "x.sh"})
	// globex: polling now, nothing queued.
	e.poll("globex", "g-1", now)
	c := client(t)
	e.signIn(c, e.url, "viewer")
	code, body := get(t, c, e.url+"/dashboard/")
	if code != http.StatusOK {
		t.Fatalf("GET /dashboard/: %d", code)
	}
	for _, want := range []string{
		`id="stranded-warning"`,
		`<li data-account="acme"><a href="/dashboard/accounts/acme"><b>acme</b></a>: 1 unit queued, the oldest for 1m30s; last poll 10s ago.</li>`,
		`<tr data-account="acme" class="status-stranded">`,
		`<tr data-account="globex" class="status-online">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("accounts page lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, `<li data-account="globex"`) {
		t.Errorf("globex (online, nothing queued) is in the stranded warning")
	}

	// The instances page of acme: offline instance, the warning again.
	code, body = get(t, c, e.url+"/dashboard/accounts/acme")
	for _, want := range []string{`id="stranded-warning"`, `<tr data-instance="a-1" class="offline">`, "a-1.example", "v9"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("instances page of acme (%d) lacks %s", code, want)
		}
	}
	// An instance polls again: no longer stranded.
	e.poll("acme", "a-2", now)
	_, body = get(t, c, e.url+"/dashboard/")
	if strings.Contains(body, `id="stranded-warning"`) || !strings.Contains(body, `<tr data-account="acme" class="status-online">`) {
		t.Errorf("with an instance online again the page still warns:\n%s", body)
	}
	if code, body := get(t, c, e.url+"/dashboard/accounts/nobody"); code != http.StatusNotFound || !strings.Contains(body, `There is no account &#34;nobody&#34;.`) {
		t.Errorf("instances of a missing account: %d\n%s", code, body)
	}
}

// TestInstancesPageCountsTheUnitsEachInstanceHoldsClaimed: an instance's
// "In flight" is the units it holds claimed now, not what it said it ran at
// its last poll: one that claimed two units and stopped polling shows 2
// until they end, then 0; an idle one that said it ran a unit shows 0.
func TestInstancesPageCountsTheUnitsEachInstanceHoldsClaimed(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	now := e.clock.Now()
	seen := func(instance string, running int) {
		t.Helper()
		if err := e.st.InstanceSeen(ctx, store.InstanceSeenParams{Account: "acme", InstanceID: instance,
			Hostname: instance + ".example", Version: "v9", Running: running, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"w_1", "w_2"} {
		e.enqueue(id, "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "x.sh"})
	}
	seen("dead", 0)
	if ws, err := e.st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "dead", Max: 2, ClaimIDs: []string{"c1", "c2"}, Now: now}); err != nil || len(ws) != 2 {
		t.Fatalf("claim: %v %v", ws, err)
	}
	seen("idle", 1)
	c := client(t)
	e.signIn(c, e.url, "viewer")
	// The row of instance, up to its In flight cell holding n.
	cell := func(instance string, n int) *regexp.Regexp {
		return regexp.MustCompile(`<tr data-instance="` + instance + `"[^>]*>(?:\s*<td[^>]*>[^\n]*</td>){4}\s*<td class="num">` + fmt.Sprint(n) + `</td>`)
	}
	wantPage := func(when string, dead int) {
		t.Helper()
		code, body := get(t, c, e.url+"/dashboard/accounts/acme")
		for _, want := range []*regexp.Regexp{cell("dead", dead), cell("idle", 0)} {
			if code != http.StatusOK || !want.MatchString(body) {
				t.Errorf("instances page of acme %s (%d) lacks\n%s\nin\n%s", when, code, want, body)
			}
		}
	}
	wantPage("while dead holds two units", 2)
	for _, id := range []string{"w_1", "w_2"} {
		if _, err := e.st.WorkCancel(ctx, store.WorkCancelParams{ID: id, Reason: "cancelled by the caller", Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	wantPage("once its units ended", 0)
}

func TestWorkShowsCommandsAndOutputOnlyToKeysAllowed(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_secret", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "rotate-db-password.sh", Args: []string{"--user=root"}})
	e.run("acme", "a-1", now.Add(-time.Minute+20*time.Millisecond), now.Add(-58*time.Second),
		&automatorv1.Result{ExitCode: 7, Stdout: []byte("new password: hunter2"), Stderr: []byte("warning: weak")})
	// A failure's reason, as the proxy gives it, names the script.
	e.enqueue("w_failed", "acme", now.Add(-30*time.Second), &automatorv1.Command{Script: "rotate-db-password.sh"})
	ws, err := e.st.WorkClaim(t.Context(), store.WorkClaimParams{Account: "acme", InstanceID: "a-1", Max: 1, ClaimIDs: []string{"c2"}, Now: now})
	if err != nil || len(ws) != 1 {
		t.Fatalf("claim: %v %v", ws, err)
	}
	if _, err := e.st.WorkComplete(t.Context(), store.WorkCompleteParams{ID: "w_failed", ClaimID: ws[0].ClaimID, State: store.StateFailed, Now: now,
		Reason: `unknown script "rotate-db-password.sh"`, SealedResult: e.seal("acme", "w_failed", crypto.DirResult, &automatorv1.Result{Failure: `unknown script "rotate-db-password.sh"`})}); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"rotate-db-password.sh", "--user=root", "hunter2", "warning: weak"}

	viewer := client(t)
	e.signIn(viewer, e.url, "viewer")
	for _, page := range []string{"/dashboard/work", "/dashboard/work/w_secret", "/dashboard/work/w_failed"} {
		code, body := get(t, viewer, e.url+page)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", page, code)
		}
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s shows %q to a key that may not see it", page, s)
			}
		}
		if !strings.Contains(body, "hidden") {
			t.Errorf("%s does not say the command is hidden", page)
		}
	}
	_, list := get(t, viewer, e.url+"/dashboard/work")
	for _, want := range []string{`<tr data-work="w_secret" data-state="succeeded">`, `<td class="num exit-code">7</td>`,
		`<td class="claimer">a-1</td>`, "claimed +20ms", "succeeded +2s"} {
		if !strings.Contains(list, want) {
			t.Errorf("work list lacks %s:\n%s", want, list)
		}
	}

	admin := client(t)
	e.signIn(admin, e.url, "admin")
	_, list = get(t, admin, e.url+"/dashboard/work")
	if !strings.Contains(list, "<code>rotate-db-password.sh</code>") {
		t.Errorf("work list does not show the script name to admin:\n%s", list)
	}
	_, unit := get(t, admin, e.url+"/dashboard/work/w_secret")
	for _, s := range secrets {
		if !strings.Contains(unit, s) {
			t.Errorf("the unit page does not show %q to admin", s)
		}
	}
	if code, body := get(t, admin, e.url+"/dashboard/work/w_nope"); code != http.StatusNotFound || !strings.Contains(body, "There is no unit of work") {
		t.Errorf("a missing unit: %d", code)
	}
}

func TestWorkFiltersAndPages(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	for i, acc := range []string{"acme", "globex", "acme", "acme", "acme"} {
		e.enqueue("w_"+string(rune('a'+i)), acc, now.Add(time.Duration(i)*time.Second), &automatorv1.Command{Script: "x.sh"})
	}
	e.run("acme", "a-1", now.Add(time.Minute), now.Add(time.Minute), &automatorv1.Result{}) // w_a
	c := client(t)
	e.signIn(c, e.url, "viewer")
	rows := func(body string) []string {
		var out []string
		for _, part := range strings.Split(body, `<tr data-work="`)[1:] {
			out = append(out, part[:strings.IndexByte(part, '"')])
		}
		return out
	}
	check := func(query string, want ...string) string {
		t.Helper()
		code, body := get(t, c, e.url+"/dashboard/work"+query)
		if got := rows(body); code != http.StatusOK || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("work%s: %d rows %v, want %v", query, code, got, want)
		}
		return body
	}
	body := check("?account=acme", "w_e", "w_d", "w_c") // page size 3
	i := strings.Index(body, `id="older" href="`)
	if i < 0 {
		t.Fatalf("no link to older units:\n%s", body)
	}
	next := body[i+len(`id="older" href="`):]
	next = strings.ReplaceAll(next[:strings.IndexByte(next, '"')], "&amp;", "&")
	if last := check(strings.TrimPrefix(next, "/dashboard/work"), "w_a"); strings.Contains(last, `id="older"`) {
		t.Errorf("the last page links to older units:\n%s", last)
	}
	// A list of exactly a page has no older one to offer (it led to an
	// empty page, a review found).
	if exact := check("?account=acme&state=queued", "w_e", "w_d", "w_c"); strings.Contains(exact, `id="older"`) {
		t.Errorf("a list of exactly a page links to older units:\n%s", exact)
	}
	check("?state=succeeded", "w_a")
	check("?account=globex&state=queued", "w_b")
	if code, body := get(t, c, e.url+"/dashboard/work?state=done"); code != http.StatusBadRequest || !strings.Contains(body, "is not a state") {
		t.Errorf("an unknown state: %d", code)
	}
	// A page position whose unit id no unit can have (PostgreSQL refuses
	// it in a query) is a position that is not valid, as one not parsed.
	for _, before := range []string{"x", "123.w_%00", "123.w_%C3%28"} {
		if code, body := get(t, c, e.url+"/dashboard/work?before="+before); code != http.StatusBadRequest || !strings.Contains(body, "The page position (before=) is not valid") {
			t.Errorf("before=%s: %d, want 400 saying the page position is not valid", before, code)
		}
	}
}

// event is one server-sent event.
type event struct{ name, data string }

// openStream opens the event stream of page with c (and cookies, if any)
// until the test ends, checks it is one, and returns its events.
func openStream(t *testing.T, c *http.Client, page string, cookies ...*http.Cookie) <-chan event {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, page, nil)
	req.Header.Set("Accept", "text/event-stream")
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET %s as an event stream: %d, Content-Type %q; want 200, text/event-stream", page, resp.StatusCode, ct)
	}
	events := make(chan event)
	go readEvents(resp.Body, events)
	return events
}

// readEvents parses a stream into events (and ": keepalive" comments as
// events named "keepalive").
func readEvents(r io.Reader, out chan<- event) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var ev event
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" {
				ev.data = strings.Join(data, "\n")
				out <- ev
			}
			ev, data = event{}, nil
		case strings.HasPrefix(line, ": keepalive"):
			out <- event{name: "keepalive"}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

func TestLivePagesStreamChangesAndKeepalives(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	e.signIn(c, e.url, "viewer")
	events := openStream(t, c, e.url+"/dashboard/")
	next := func(name string) event {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("stream ended waiting for %q", name)
				}
				if ev.name == name {
					return ev
				}
			case <-timeout:
				t.Fatalf("no %q event within 10s", name)
			}
		}
	}
	first := next("update")
	if !strings.Contains(first.data, `<table id="accounts">`) || strings.Contains(first.data, "<html") {
		t.Fatalf("first update is not the page's content:\n%s", first.data)
	}
	next("keepalive")

	// Work queued on acme, whose only instance stopped polling: the next
	// update warns.
	now := e.clock.Now()
	e.poll("acme", "a-1", now.Add(-time.Minute))
	e.enqueue("w_1", "acme", now, &automatorv1.Command{Script: "x.sh"})
	for deadline := time.Now().Add(waittest.Bound); ; {
		if ev := next("update"); strings.Contains(ev.data, `id="stranded-warning"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for an update that warns of the unit queued with no instance polling", waittest.Bound)
		}
	}

	// A page that does not exist is refused before any stream begins, so
	// the browser does not reconnect to it.
	bad, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.url+"/dashboard/work/w_nope", nil)
	bad.Header.Set("Accept", "text/event-stream")
	if resp, err := c.Do(bad); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("stream of a missing unit: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}

	// A revoked key is signed out of the stream.
	if _, err := e.st.APIKeyRevoke(t.Context(), store.APIKeyRevokeParams{ID: "viewer", Now: now}); err != nil {
		t.Fatal(err)
	}
	next("signedout")
}

func TestStaticAssetsAndSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	for path, want := range map[string]string{
		"/dashboard/static/style.css": "text/css",
		"/dashboard/static/live.js":   "javascript",
		"/dashboard/login":            "text/html",
	} {
		resp, err := c.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), want) {
			t.Errorf("%s: %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	// The static folder is not listed: a file server would list its
	// files, which no page asks for; nor when the path's escapes decode
	// to the folder ("./"), nor is a file taken for a folder.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, path := range []string{"/dashboard/static/", "/dashboard/static/.%2f", "/dashboard/static/%2e", "/dashboard/static/live.js%2f", "/dashboard/static/nope.js"} {
		resp, err := c.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusNotFound
		if path == "/dashboard/static/" {
			want = http.StatusSeeOther // no page: signing in is asked first
		}
		if resp.StatusCode != want || strings.Contains(string(body), "live.js") {
			t.Errorf("%s: %d, want %d listing nothing: %s", path, resp.StatusCode, want, body)
		}
	}
}

// readSpecEvents parses a stream as a browser's EventSource does (the
// HTML standard's event-stream rules): a line ends at CRLF, LF or a lone
// CR; "field: value" lines set the event's type and data; a blank line
// dispatches it (an event with no data line is dropped).
func readSpecEvents(r io.Reader, out chan<- event) {
	defer close(out)
	br := bufio.NewReader(r)
	var name string
	var data []string
	hasData := false
	for {
		var line []byte
		for {
			b, err := br.ReadByte()
			if err != nil {
				return
			}
			if b == '\n' {
				break
			}
			if b == '\r' {
				if nb, err := br.Peek(1); err == nil && nb[0] == '\n' {
					br.ReadByte()
				}
				break
			}
			line = append(line, b)
		}
		s := string(line)
		if s == "" {
			if hasData {
				if name == "" {
					name = "message"
				}
				out <- event{name: name, data: strings.Join(data, "\n")}
			}
			name, data, hasData = "", nil, false
			continue
		}
		if strings.HasPrefix(s, ":") {
			continue
		}
		field, value, _ := strings.Cut(s, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data, hasData = append(data, value), true
		}
	}
}

// A carriage return in what a page shows (a progress meter in a script's
// output, or a host name a proxy reports) ends a line of the event stream
// for the browser as much as a line feed does. It must neither cut the
// update short nor start events of its own (a forged "signedout").
func TestLiveUpdatesCarryCarriageReturnsIntact(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_progress", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "download.sh"})
	e.run("acme", "a-1", now.Add(-59*time.Second), now.Add(-58*time.Second),
		&automatorv1.Result{Stdout: []byte("10%\r50%\r\revent: signedout\rdata: x\r\rdone 100%\n")})
	if err := e.st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: "a-2",
		Hostname: "evil\r\revent: signedout\rdata: x\r\rhost", Version: "v9", Now: now}); err != nil {
		t.Fatal(err)
	}
	c := client(t)
	e.signIn(c, e.url, "admin")
	for page, want := range map[string][]string{
		"/dashboard/work/w_progress": {"10%", "50%", "done 100%", `id="unit-stderr"`},
		"/dashboard/accounts/acme":   {"evil", `data-instance="a-2"`, "host</td>"},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+page, nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		events := make(chan event)
		go readSpecEvents(resp.Body, events)
		var ev event
		select {
		case ev = <-events:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no event within 10s", page)
		}
		cancel()
		resp.Body.Close()
		for range events {
		}
		if ev.name != "update" {
			t.Errorf("%s: the first event is %q, want update:\n%s", page, ev.name, ev.data)
			continue
		}
		for _, w := range want {
			if !strings.Contains(ev.data, w) {
				t.Errorf("%s: the update lacks %q:\n%s", page, w, ev.data)
			}
		}
	}
}

// TestShortTimesSayTheyAreUTC: the times of day in the work list and the
// instances page are UTC, as every full time on the dashboard (and in the
// CLI's listings) is, and say so: "03:03:55Z", not a bare "03:03:55" an
// operator would read as local time.
func TestShortTimesSayTheyAreUTC(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now() // 03:04:05 UTC
	e.poll("acme", "a-1", now.Add(-10*time.Second))
	e.enqueue("w_1", "acme", now.Add(-90*time.Second), &automatorv1.Command{Script: "x.sh"})
	c := client(t)
	e.signIn(c, e.url, "viewer")
	for page, want := range map[string]string{
		"/dashboard/accounts/acme": ">03:03:55Z <",
		"/dashboard/work":          ">queued 03:02:35Z<",
	} {
		code, body := get(t, c, e.url+page)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("%s (%d) lacks %q:\n%s", page, code, want, body)
		}
	}
}

// TestNamesAProxyOrCallerChoseAreShownAsText: an instance id, host name
// and version come from a proxy, a script name, its arguments and output
// from a caller and a script; none is checked for markup. Every page
// shows them as text, never as HTML of its own.
func TestNamesAProxyOrCallerChoseAreShownAsText(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	instance := `a"><svg onload=alert(1)>`
	e.enqueue("w_markup", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "<script>alert(2)</script>.sh", Args: []string{`"><img src=x onerror=alert(3)>`}})
	e.run("acme", instance, now.Add(-59*time.Second), now.Add(-58*time.Second),
		&automatorv1.Result{Stdout: []byte("<b>out</b>"), Stderr: []byte("</pre><iframe src=//x>")})
	if err := e.st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: instance,
		Hostname: "<i>host</i>", Version: "<u>v1</u>", Now: now}); err != nil {
		t.Fatal(err)
	}
	c := client(t)
	e.signIn(c, e.url, "admin")
	raw := []string{"<svg", "<script>alert", "<img", "<b>out", "<iframe", "<i>host", "<u>v1"}
	for page, want := range map[string][]string{
		"/dashboard/work/w_markup": {"&lt;script&gt;alert(2)&lt;/script&gt;.sh", "&lt;b&gt;out&lt;/b&gt;", "&lt;/pre&gt;&lt;iframe"},
		"/dashboard/accounts/acme": {"&lt;i&gt;host&lt;/i&gt;", "&lt;u&gt;v1&lt;/u&gt;", "&lt;svg onload=alert(1)&gt;"},
		"/dashboard/work":          {"&lt;svg onload=alert(1)&gt;"},
	} {
		code, body := get(t, c, e.url+page)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", page, code)
		}
		for _, r := range raw {
			if strings.Contains(body, r) {
				t.Errorf("%s holds %q as markup:\n%s", page, r, body)
			}
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q, the name shown as text:\n%s", page, w, body)
			}
		}
	}
}

// TestWorkListKeepsAFailureReasonFromKeysThatMayNotSeeIt: the automator
// keeps what the list showed of each unit, so a list read again opens
// nothing; what it kept for a key that may see commands (the reason of a
// failure, which names the script, and the script name) is still not shown
// to one that may not, on the list and on the unit's page.
func TestWorkListKeepsAFailureReasonFromKeysThatMayNotSeeIt(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_failed", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "rotate-db-password.sh"})
	ws, err := e.st.WorkClaim(t.Context(), store.WorkClaimParams{Account: "acme", InstanceID: "a-1", Max: 1, ClaimIDs: []string{"c"}, Now: now})
	if err != nil || len(ws) != 1 {
		t.Fatalf("claim: %v %v", ws, err)
	}
	reason := `unknown script "rotate-db-password.sh"`
	if _, err := e.st.WorkComplete(t.Context(), store.WorkCompleteParams{ID: "w_failed", ClaimID: "c", State: store.StateFailed, Now: now,
		Reason: "the proxy could not run the command", SealedResult: e.seal("acme", "w_failed", crypto.DirResult, &automatorv1.Result{Failure: reason})}); err != nil {
		t.Fatal(err)
	}
	admin, viewer := client(t), client(t)
	e.signIn(admin, e.url, "admin")
	e.signIn(viewer, e.url, "viewer")
	for i := range 2 {
		_, list := get(t, admin, e.url+"/dashboard/work")
		if !strings.Contains(list, `<td class="outcome">unknown script &#34;rotate-db-password.sh&#34;</td>`) || !strings.Contains(list, "<code>rotate-db-password.sh</code>") {
			t.Errorf("read %d: the list does not show admin the failure's reason and the script:\n%s", i, list)
		}
		for _, page := range []string{"/dashboard/work", "/dashboard/work/w_failed"} {
			code, body := get(t, viewer, e.url+page)
			if code != http.StatusOK || strings.Contains(body, "rotate-db-password") {
				t.Errorf("read %d: %s shows the viewer the failure's reason or the script (%d):\n%s", i, page, code, body)
			}
			if !strings.Contains(body, "reason hidden") {
				t.Errorf("read %d: %s does not tell the viewer the reason is hidden:\n%s", i, page, body)
			}
		}
	}
}

// TestAGracefullyStoppedInstanceIsShownStopped: an instance whose last
// poll, a second ago, said it was stopping is shown stopped on its
// account's page, not online, and the account with it: its only instance
// is not online, so its queued unit is stranded, at once rather than two
// poll windows later.
func TestAGracefullyStoppedInstanceIsShownStopped(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	if err := e.st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: "a-1",
		Hostname: "a-1.example", Version: "v9", Stopping: true, Now: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	e.enqueue("w_1", "acme", now, &automatorv1.Command{Script: "x.sh"})
	c := client(t)
	e.signIn(c, e.url, "viewer")
	code, body := get(t, c, e.url+"/dashboard/accounts/acme")
	for _, want := range []string{
		`id="stranded-warning"`,
		`<tr data-instance="a-1" class="stopped">`,
		`<span class="badge status status-stopped" title="its last poll said it was stopping (a service stop, SIGTERM, Ctrl+C)">stopped</span>`,
		`<div><dt>Instances online</dt><dd>0 of 1</dd></div>`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("instances page of acme (%d) lacks %s:\n%s", code, want, body)
		}
	}
	_, body = get(t, c, e.url+"/dashboard/")
	if !strings.Contains(body, `<tr data-account="acme" class="status-stranded">`) {
		t.Errorf("accounts page does not show acme stranded:\n%s", body)
	}
}

// TestAnInstanceRefusedForWantOfAUsableKeyIsShownRefused: an instance
// still on the profile of before a key rotation polls, and its polls are
// refused: it is shown refused on its account's page, with the key ids it
// holds and the fix, not online (nor offline: it is alive), and counted
// refused; the account's queued unit is stranded, the warnings (accounts
// page and account page) naming the refused instances and the fix.
func TestAnInstanceRefusedForWantOfAUsableKeyIsShownRefused(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	if err := e.st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: "a-1",
		Hostname: "a-1.example", Version: "v9", RefusedKeyIDs: []uint32{1}, Now: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	e.enqueue("w_1", "acme", now, &automatorv1.Command{Script: "x.sh"})
	c := client(t)
	e.signIn(c, e.url, "viewer")
	code, body := get(t, c, e.url+"/dashboard/accounts/acme")
	for _, want := range []string{
		`id="stranded-warning"`,
		`or were refused for want of a usable key, for a key that is not the account's or for an expired account token`,
		`<tr data-instance="a-1" class="refused">`,
		`<span class="badge status status-refused" title="its polls are refused: it holds no key of the account usable now">refused</span>`,
		`<span class="note">holds key ids [1]: install the account's latest profile</span>`,
		`<div><dt>Instances online</dt><dd>0 of 1, <span class="refused">1 refused</span></dd></div>`,
		`<p class="refused-hint">1 instance of <b>acme</b> polls but is refused (holding no usable key, a key that is not the account's, or an expired account token): install the account's latest profile on it.</p>`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("instances page of acme (%d) lacks %s:\n%s", code, want, body)
		}
	}
	_, body = get(t, c, e.url+"/dashboard/")
	for _, want := range []string{
		`<tr data-account="acme" class="status-stranded">`,
		`<td class="online">0 of 1, <span class="refused">1 refused</span></td>`,
		`<li data-account="acme"><a href="/dashboard/accounts/acme"><b>acme</b></a>: 1 unit queued, the oldest for 0s; last poll 1s ago; 1 instance refused (no usable key, an expired account token, or a key that is not the account's): install the account's latest profile.</li>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("accounts page lacks %s:\n%s", want, body)
		}
	}
}

// TestAnAccountWhoseOnlyInstancesAreRefusedIsShownRefused: an account with
// nothing queued whose only live instances poll and are refused for want of
// a usable key is refused, not offline (its proxies are up), on the
// accounts page and its own, with a warning naming the fix; one whose
// instances are down is offline, with no such warning.
func TestAnAccountWhoseOnlyInstancesAreRefusedIsShownRefused(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	for _, id := range []string{"a-1", "a-2"} {
		if err := e.st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: id,
			Hostname: id + ".example", Version: "v9", RefusedKeyIDs: []uint32{1}, Now: now.Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	e.poll("globex", "g-1", now.Add(-time.Hour))
	c := client(t)
	e.signIn(c, e.url, "viewer")
	code, body := get(t, c, e.url+"/dashboard/")
	for _, want := range []string{
		`<tr data-account="acme" class="status-refused">`,
		`<span class="badge status status-refused">refused</span>`,
		`<td class="online">0 of 2, <span class="refused">2 refused</span></td>`,
		`id="refused-warning"`,
		`<li data-account="acme"><a href="/dashboard/accounts/acme"><b>acme</b></a>: 2 instances refused (no usable key, an expired account token, or a key that is not the account's): install the account's latest profile; last poll 1s ago.</li>`,
		`<tr data-account="globex" class="status-offline">`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("accounts page (%d) lacks %s:\n%s", code, want, body)
		}
	}
	if strings.Contains(body, `id="stranded-warning"`) || strings.Contains(body, `<li data-account="globex"`) {
		t.Errorf("accounts page warns of stranded work, or of globex (offline):\n%s", body)
	}
	code, body = get(t, c, e.url+"/dashboard/accounts/acme")
	for _, want := range []string{
		`<span class="badge status status-refused">refused</span></h1>`,
		`<div><dt>Instances online</dt><dd>0 of 2, <span class="refused">2 refused</span></dd></div>`,
		`id="refused-warning"`,
		`<p class="refused-hint">2 instances of <b>acme</b> poll but are refused (holding no usable key, a key that is not the account's, or an expired account token): install the account's latest profile on them.</p>`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("instances page of acme (%d) lacks %s:\n%s", code, want, body)
		}
	}
	_, body = get(t, c, e.url+"/dashboard/accounts/globex")
	if strings.Contains(body, `id="refused-warning"`) || strings.Contains(body, `class="refused-hint"`) {
		t.Errorf("instances page of globex (offline) warns of refused instances:\n%s", body)
	}
}

// TestAnInstanceOnAnExpiredTokenIsShownRefusedForIt: an instance still
// running the whole profile of before a key rotation whose overlap has
// ended polls, and its polls are refused at authentication: it is shown
// refused on its account's page, saying its account token expired and
// the fix, not online (nor offline: it is alive), and the account's queued
// unit is stranded, the warning saying why it may be.
func TestAnInstanceOnAnExpiredTokenIsShownRefusedForIt(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	if err := e.st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: "a-1",
		Hostname: "a-1.example", Version: "v9", TokenExpired: true, Now: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	e.enqueue("w_1", "acme", now, &automatorv1.Command{Script: "x.sh"})
	c := client(t)
	e.signIn(c, e.url, "viewer")
	code, body := get(t, c, e.url+"/dashboard/accounts/acme")
	for _, want := range []string{
		`id="stranded-warning"`,
		`or were refused for want of a usable key, for a key that is not the account's or for an expired account token`,
		`<tr data-instance="a-1" class="refused">`,
		`<span class="badge status status-refused" title="its polls are refused: its account token expired (rotated, and its overlap ended)">refused</span>`,
		`<span class="note">its account token expired: install the account's latest profile</span>`,
		`<div><dt>Instances online</dt><dd>0 of 1, <span class="refused">1 refused</span></dd></div>`,
		`<p class="refused-hint">1 instance of <b>acme</b> polls but is refused (holding no usable key, a key that is not the account's, or an expired account token): install the account's latest profile on it.</p>`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("instances page of acme (%d) lacks %s:\n%s", code, want, body)
		}
	}
}

// TestAnOverLongIDOrNameInAPageIsQuotedCut: a work id, an account name or a
// state in a URL that names nothing is quoted in the page that says so, but
// no more than its first 80 bytes, with its length: a crafted URL does not
// come back whole (here 7,000 bytes).
func TestAnOverLongIDOrNameInAPageIsQuotedCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := client(t)
	e.signIn(c, e.url, "admin")
	long := strings.Repeat("x", 7000)
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/dashboard/work/w_" + long, http.StatusNotFound},
		{"/dashboard/accounts/" + long, http.StatusNotFound},
		{"/dashboard/work?account=" + long, http.StatusBadRequest},
		{"/dashboard/work?state=" + long, http.StatusBadRequest},
	} {
		code, body := get(t, c, e.url+tc.path)
		if code != tc.code || !strings.Contains(body, strings.Repeat("x", 70)) || !strings.Contains(body, " bytes)") || strings.Contains(body, strings.Repeat("x", 100)) {
			t.Errorf("GET %s…: %d; want %d, quoting the first 80 bytes and the length, not the whole:\n%.600s", tc.path[:30], code, tc.code, body)
		}
	}
}

// fullAudit is a server whose audit log cannot take a sign-in's record:
// its database is out of disk space.
type fullAudit struct{ *server.Server }

func (fullAudit) SignedIn(context.Context, string, string) error {
	return fmt.Errorf("writing the audit log: %w", store.ErrStorageFull)
}

// TestASignInOnAFullDiskSaysSo: a sign-in whose audit record a full disk
// keeps from being written is refused (no sign-in the audit log does not
// hold), and the page says why and when to sign in again, with 507: not
// "try again", which would fail the same until space is freed (a review).
func TestASignInOnAFullDiskSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, base := e.start(replica{opts: func(o *dashboard.Options) { o.SignIns = fullAudit{e.srv} }})
	c := client(t)
	resp, err := c.PostForm(base+"/dashboard/login", url.Values{"api_key": {e.secrets["admin"]}, "next": {"/dashboard/work"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(string(body), "out of disk space") || !strings.Contains(string(body), "once its operator has freed space") {
		t.Errorf("sign-in on a full disk: %d\n%s\nwant 507, saying the disk is full and when to sign in again", resp.StatusCode, body)
	}
	if code, _ := get(t, c, base+"/dashboard/work"); code != http.StatusSeeOther {
		t.Errorf("a page after the refused sign-in: %d; want 303 to the sign-in form", code)
	}
}
