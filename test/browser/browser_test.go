//go:build linux

package browser

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/proctest"
)

// page is a headless Chromium tab with the test's helpers.
type page struct {
	t     *testing.T
	ctx   context.Context
	shots string
	n     int
}

// newPage starts Debian's Chromium headless, with a fresh profile.
func newPage(t *testing.T) *page {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium leaves its singleton socket's directory in TMPDIR.
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return &page{t: t, ctx: ctx, shots: screenshotDir(t)}
}

// newTab opens another tab of p's browser (its cookies too), closed when
// the test ends; its screenshots are numbered after p's.
func (p *page) newTab() *page {
	p.t.Helper()
	ctx, cancel := chromedp.NewContext(p.ctx)
	p.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		p.t.Fatalf("opening a tab: %v", err)
	}
	return &page{t: p.t, ctx: ctx, shots: p.shots, n: p.n}
}

// screenshotDir is $AUTOMATOR_SCREENSHOTS, or bin/dashboard-screenshots in
// the repository, emptied of earlier screenshots.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AUTOMATOR_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "bin", "dashboard-screenshots")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// do runs actions, each step bounded by 30 s.
func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		loc, _ := chromedp.Run(p.ctx, chromedp.Location())
		p.shot("failure")
		p.t.Fatalf("in the browser at %s: %v", loc, err)
	}
}

// text is the visible text of the first element matching sel.
func (p *page) text(sel string) string {
	p.t.Helper()
	s, err := p.tryText(sel)
	if err != nil {
		p.t.Fatalf("reading the text of %s: %v", sel, err)
	}
	return s
}

// tryText is text, with the error of a read that failed.
func (p *page) tryText(sel string) (string, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
}

// eval evaluates a JavaScript expression.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// wantText fails unless the element's text holds every string of want.
//
// A live page's content is replaced whenever the server sends it again
// (live.js), and the element read in that instant can read empty, or be
// gone between being found and being read ("No node with given id
// found"): the text is read again until it holds every want, for up to
// 10 s.
func (p *page) wantText(sel string, want ...string) {
	p.t.Helper()
	holds := func(got string) bool {
		for _, w := range want {
			if !strings.Contains(got, w) {
				return false
			}
		}
		return true
	}
	got, err := p.tryText(sel)
	for end := time.Now().Add(10 * time.Second); (err != nil || !holds(got)) && time.Now().Before(end); got, err = p.tryText(sel) {
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("reading the text of %s: %v", sel, err)
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			p.t.Errorf("%s shows %q, want it to contain %q", sel, got, w)
		}
	}
}

// shot saves a full-page screenshot as NN-name.png, once the page is
// loaded and laid out. Chromium refuses to take one ("Cannot take
// screenshot with 0 width") while a navigation's new document has not been
// painted, which a loaded machine once stretched past the checks before a
// shot (the click that submits a filter, and the new page's control): the
// poll runs on animation frames, so it passes once a frame of the laid-out
// document was drawn, and the shot is tried again, after another poll, if
// Chromium still refuses it.
func (p *page) shot(name string) {
	p.t.Helper()
	p.n++
	var png []byte
	var err error
	for try := 0; try < 3; try++ {
		_, err = chromedp.Run(p.ctx, chromedp.Poll[bool](`document.readyState === "complete" && document.documentElement.getBoundingClientRect().width > 0`,
			chromedp.WithPollingTimeout(10*time.Second)))
		if err == nil {
			png, err = chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
		}
		if err == nil || !strings.Contains(err.Error(), "0 width") {
			break
		}
	}
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.shots, fmt.Sprintf("%02d-%s.png", p.n, name))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Error(err)
	}
}

// addAPIKey stores another (admin, unscoped) API key and returns its secret.
func addAPIKey(t *testing.T, dir, id string) string {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(t.Context(), cfg.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secret, err := crypto.NewToken("oak_")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.APIKeyCreate(t.Context(), store.APIKeyCreateParams{ID: id, Hash: crypto.HashToken(secret), Name: id, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return secret
}

// sessionCookie returns the dashboard's session cookie as the browser
// holds it (HttpOnly: read through the DevTools protocol, not the page).
func sessionCookie(p *page, base string) *http.Cookie {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/dashboard/"}})
	if err != nil {
		p.t.Fatalf("reading the browser's cookies: %v", err)
	}
	for _, c := range res.Cookies {
		if c.Name == "opsgate_dashboard" {
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	p.t.Fatalf("the browser holds no session cookie for %s", base)
	return nil
}

// getWithCookie returns the status of a GET of u that carries cookie c
// alone, without following a redirect.
func getWithCookie(t *testing.T, u string, c *http.Cookie) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(c)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDashboardInARealBrowser signs in to the dashboard of a real
// automator with a real proxy and walks every page in headless Chromium:
// accounts, the instances of an account, work (filtered), one unit as a key
// that may not see commands and as one that may, and the stranded-work
// warning that arrives by server-sent events, without a reload, once the
// only instance is killed while work is queued.
func TestDashboardInARealBrowser(t *testing.T) {
	a := startAutomator(t)
	viewerKey := addAPIKey(t, a.dir, "viewer")
	adminKey, err := os.ReadFile(filepath.Join(a.dir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	acme := a.account(t, "acme")
	a.account(t, "globex")
	scripts := t.TempDir()
	for name, body := range map[string]string{
		"hello.sh": `echo "hello $1 from $PROXY_INSTANCE_ID"`,
		"fail.sh":  `echo "disk full" >&2; exit 3`,
	} {
		proctest.WriteScript(t, scripts, name, body)
	}
	p1 := startProxy(t, acme, scripts, "p1")
	exec := func(args ...string) string {
		return run(t, bin.automator, append([]string{"exec", "--data-dir", a.dir, "--account", "acme"}, args...)...)
	}
	if out := exec("hello.sh", "world"); out != "hello world from p1\n" {
		t.Fatalf("exec hello.sh: %q", out)
	}
	exec("fail.sh")
	exec("missing.sh")
	host, _ := os.Hostname()

	p := newPage(t)

	// Sign-in: the root leads to the form.
	p.do(chromedp.Navigate(a.http+"/"), chromedp.WaitVisible(chromedp.CSS("#api-key")))
	if loc := eval[string](p, "location.pathname"); loc != "/dashboard/login" {
		t.Errorf("the root led to %s, want the sign-in form", loc)
	}
	p.shot("sign-in")
	p.do(chromedp.SendKeys(chromedp.CSS("#api-key"), "oak_wrong"), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")))
	p.wantText("#login-error", "not a valid API key")
	p.do(chromedp.SetValue(chromedp.CSS("#api-key"), viewerKey), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("table#accounts")))

	// Accounts: acme online with its one instance, globex with none, no
	// warning.
	p.wantText("#signed-in-key", "viewer")
	p.wantText(`tr[data-account="acme"]`, "acme", "online", "1 of 1")
	p.wantText(`tr[data-account="globex"]`, "globex", "no instances", "0 of 0", "never")
	if n := eval[int](p, `document.querySelectorAll("#stranded-warning").length`); n != 0 {
		t.Errorf("a stranded-work warning with every queue empty")
	}
	p.do(chromedp.WaitVisible(chromedp.CSS("#live-status.live")))
	p.shot("accounts")

	// Instances of acme.
	p.do(chromedp.Click(chromedp.CSS(`#accounts a[href="/dashboard/accounts/acme"]`)), chromedp.WaitVisible(chromedp.CSS("table#instances")))
	p.wantText(`tr[data-instance="p1"]`, "p1", host, "online")
	p.wantText("#account-name", "acme")
	p.shot("instances-acme")

	// Work: three units, exit codes for everyone, script names hidden.
	p.do(chromedp.Click(chromedp.CSS(`nav a[href="/dashboard/work"]`)), chromedp.WaitVisible(chromedp.CSS("table#work")))
	if n := eval[int](p, `document.querySelectorAll("#work tbody tr").length`); n != 3 {
		t.Errorf("work page lists %d units, want 3", n)
	}
	codes := eval[[]string](p, `[...document.querySelectorAll("#work tbody tr")].map(r => r.dataset.state + " " + r.querySelector(".exit-code").innerText + " " + r.querySelector(".script").innerText)`)
	if strings.Join(codes, ", ") != "failed — hidden, succeeded 3 hidden, succeeded 0 hidden" {
		t.Errorf("work rows (state, exit code, script) = %q", codes)
	}
	// The proxy's reason for the failure names the script: hidden too.
	p.wantText(`#work tbody tr[data-state="failed"]`, "p1", "could not run the command", "hidden")
	if row := p.text(`#work tbody tr[data-state="failed"]`); strings.Contains(row, "missing.sh") {
		t.Errorf("the failed unit's row shows the script name to the viewer: %q", row)
	}
	p.shot("work")
	p.do(chromedp.SetValue(chromedp.CSS("#filter-state"), "succeeded"), chromedp.Click(chromedp.CSS("#filter-apply")),
		chromedp.WaitReady(chromedp.CSS(`#filter-state option[value="succeeded"][selected]`)))
	if n := eval[int](p, `document.querySelectorAll("#work tbody tr[data-state=succeeded]").length + 10*document.querySelectorAll("#work tbody tr:not([data-state=succeeded])").length`); n != 2 {
		t.Errorf("filtered by succeeded: %d (succeeded + 10×others), want 2", n)
	}
	p.shot("work-succeeded")

	// One unit as the viewer: timeline, claimer, exit code; no command.
	unitURL := eval[string](p, `[...document.querySelectorAll("#work tbody tr")].find(r => r.querySelector(".exit-code").innerText == "0").querySelector("a").href`)
	p.do(chromedp.Navigate(unitURL), chromedp.WaitVisible(chromedp.CSS("#unit-timeline")))
	p.wantText("#unit-timeline", "queued", "claimed", "by p1", "succeeded")
	p.wantText("#unit-exit-code", "0")
	p.wantText("#unit-hidden", "hidden", "admin")
	if body := p.text("main"); strings.Contains(body, "hello.sh") || strings.Contains(body, "world") {
		t.Errorf("the unit page shows the command to the viewer:\n%s", body)
	}
	p.shot("unit-as-viewer")

	// Sign out: a copy of the session cookie, taken before, is refused
	// from then on. Then sign in with the admin key: the command and
	// output show.
	copied := sessionCookie(p, a.http)
	if code := getWithCookie(t, a.http+"/dashboard/", copied); code != http.StatusOK {
		t.Fatalf("the copied session cookie before sign-out: %d, want 200", code)
	}
	p.do(chromedp.Click(chromedp.CSS("#sign-out")), chromedp.WaitVisible(chromedp.CSS("#api-key")))
	if code := getWithCookie(t, a.http+"/dashboard/", copied); code != http.StatusSeeOther {
		t.Errorf("the copied session cookie after sign-out: %d, want 303 to the sign-in form", code)
	}
	// The sign-in form loaded anew: the one sign-out led to may still be
	// replacing its nodes (a clean-clone run failed on "No node with
	// given id found" filling it).
	p.do(chromedp.Navigate(a.http+"/dashboard/login"), chromedp.WaitVisible(chromedp.CSS("#api-key")),
		chromedp.SetValue(chromedp.CSS("#api-key"), strings.TrimSpace(string(adminKey))), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("table#accounts")))
	p.do(chromedp.Navigate(unitURL), chromedp.WaitVisible(chromedp.CSS("#unit-script")))
	p.wantText("#signed-in-key", "admin")
	p.wantText("#unit-script", "hello.sh")
	p.wantText("#unit-args", "world")
	p.wantText("#unit-stdout", "hello world from p1")
	p.shot("unit-as-admin")
	p.do(chromedp.Navigate(a.http+"/dashboard/work?state=failed"), chromedp.WaitVisible(chromedp.CSS("table#work")))
	p.wantText(`#work tbody tr[data-state="failed"]`, "unknown script", "missing.sh")

	// Stranded work: the only instance of acme dies, a unit is queued; the
	// open accounts page warns by itself (server-sent events, no reload).
	p.do(chromedp.Navigate(a.http+"/dashboard/"), chromedp.WaitVisible(chromedp.CSS("#live-status.live")))
	eval[bool](p, `window.notReloaded = true`)
	p1.Kill(t)
	startProc(t, "exec-stranded", bin.automator, "exec", "--data-dir", a.dir, "--account", "acme", "--timeout", "10m", "hello.sh", "again")
	p.do(chromedp.WaitVisible(chromedp.CSS("#stranded-warning")))
	if !eval[bool](p, `window.notReloaded === true`) {
		t.Errorf("the page reloaded; the warning should arrive as a live update")
	}
	p.wantText("#stranded-warning", "Stranded work", "acme", "1 unit queued")
	p.wantText(`tr[data-account="acme"]`, "stranded", "0 of 1")
	p.shot("stranded-work")
	p.do(chromedp.Click(chromedp.CSS(`#stranded-warning a[href="/dashboard/accounts/acme"]`)), chromedp.WaitVisible(chromedp.CSS("table#instances")))
	p.wantText(`tr[data-instance="p1"]`, "offline")
	p.wantText("#stranded-warning", "1 unit queued", "no instance of acme is online")
	p.shot("instances-acme-offline")

	// Live pages per key (dashboard_live_pages_per_key, 64): with this
	// page and 63 more of the key open, one more, in a second tab, stays
	// as it was loaded and says why.
	p.do(chromedp.WaitVisible(chromedp.CSS("#live-status.live")))
	cookie := sessionCookie(p, a.http)
	for range 63 {
		holdLivePage(t, a.http+"/dashboard/work", cookie)
	}
	tab := p.newTab()
	tab.do(chromedp.Navigate(a.http+"/dashboard/work"), chromedp.WaitVisible(chromedp.CSS("#live-status.paused")))
	tab.wantText("#live-status", "not live: this API key has 64 live pages open on this automator")
	tab.wantText("table#work", "failed")
	tab.shot("work-not-live")
}

// holdLivePage opens the live stream of page u with the session cookie c,
// as a browser's page does, and holds it open until the test ends, once
// its first update came: it counts among the key's live pages.
func holdLivePage(t *testing.T, u string, c *http.Cookie) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.AddCookie(c)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the live stream of %s ended before its first update: %v", u, err)
		}
		if line == "event: paused\n" {
			t.Fatalf("the live stream of %s was paused: the key has more live pages open than the test opened", u)
		}
		if line == "event: update\n" {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()
}
