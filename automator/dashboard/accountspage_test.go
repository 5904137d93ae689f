package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// addAccount creates account name, with a key of id 1.
func (e *env) addAccount(name string) {
	e.t.Helper()
	k, err := crypto.NewKey(1)
	if err != nil {
		e.t.Fatal(err)
	}
	sealed, err := e.master.SealKey(name, k)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.AccountCreate(e.t.Context(), store.AccountCreateParams{Name: name, TokenHash: []byte("t-" + name), KeyID: 1, SealedKey: sealed, Now: e.clock.Now()}); err != nil {
		e.t.Fatal(err)
	}
	e.keys[name] = k
}

// TestTheAccountsPageShowsAPageOfAccountsAndWarnsOfEveryAccount: the
// accounts table shows AccountsPageSize accounts by name a page, with links
// to the next page and back to the first, and so does its live page at
// every update (not every account's row, at every refresh of every tab);
// the stranded and refused warnings above it name every account they
// concern, on every page, an account of another page stranded meanwhile
// included.
func TestTheAccountsPageShowsAPageOfAccountsAndWarnsOfEveryAccount(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"hooli", "initech", "umbrella"} {
		e.addAccount(name)
	}
	now := e.clock.Now()
	e.poll("acme", "a-1", now)
	e.enqueue("w_i", "initech", now.Add(-time.Minute), &automatorv1.Command{Script: "i.sh"}) // no instance: stranded
	if err := e.st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "umbrella", InstanceID: "u-1", Hostname: "u-1.example",
		Version: "v9", RefusedKeyIDs: []uint32{7}, Now: now}); err != nil {
		t.Fatal(err)
	}
	_, base := e.start(replica{opts: func(o *dashboard.Options) { o.AccountsPageSize = 2 }})
	c := client(t)
	e.signIn(c, base, "viewer")

	row := func(name string) string { return `<tr data-account="` + name + `"` }
	warnings := []string{`<li data-account="initech">`, `<li data-account="umbrella">`}
	for _, page := range []struct {
		url       string
		rows      []string
		pager     []string
		notShown  []string
		lastLinks string // a link the page must not have
	}{
		{"/dashboard/", []string{"acme", "globex"}, []string{`accounts 1 to 2 of 5`, `<a id="accounts-next" href="/dashboard/?after=globex">`},
			[]string{"hooli", "initech", "umbrella"}, `id="accounts-first"`},
		{"/dashboard/?after=globex", []string{"hooli", "initech"}, []string{`accounts 3 to 4 of 5`, `<a id="accounts-first" href="/dashboard/">`,
			`<a id="accounts-next" href="/dashboard/?after=initech">`}, []string{"acme", "globex", "umbrella"}, ""},
		{"/dashboard/?after=initech", []string{"umbrella"}, []string{`accounts 5 to 5 of 5`, `<a id="accounts-first" href="/dashboard/">`},
			[]string{"acme", "globex", "hooli", "initech"}, `id="accounts-next"`},
	} {
		code, body := get(t, c, base+page.url)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", page.url, code, body)
		}
		for _, name := range page.rows {
			if !strings.Contains(body, row(name)) {
				t.Errorf("%s lacks the row of %s:\n%s", page.url, name, body)
			}
		}
		for _, name := range page.notShown {
			if strings.Contains(body, row(name)) {
				t.Errorf("%s shows the row of %s, of another page:\n%s", page.url, name, body)
			}
		}
		for _, want := range append(page.pager, warnings...) {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %s:\n%s", page.url, want, body)
			}
		}
		if page.lastLinks != "" && strings.Contains(body, page.lastLinks) {
			t.Errorf("%s has %s:\n%s", page.url, page.lastLinks, body)
		}
	}
	if code, body := get(t, c, base+"/dashboard/?after=%3Cx%3E"); code != http.StatusBadRequest || !strings.Contains(body, "is not an account name") {
		t.Errorf("GET /dashboard/?after=<x>: %d\n%s\nwant 400, not an account name", code, body)
	}

	events := openStream(t, c, base+"/dashboard/")
	t.Cleanup(func() {
		go func() {
			for range events {
			}
		}()
	})
	ev := nextUpdate(t, events, "the live accounts page")
	if ev.name != "update" || !strings.Contains(ev.data, row("acme")) || !strings.Contains(ev.data, row("globex")) ||
		strings.Contains(ev.data, row("initech")) || !strings.Contains(ev.data, warnings[0]) {
		t.Fatalf("first event %q:\n%s\nwant the rows of acme and globex alone, and the warning of initech", ev.name, ev.data)
	}
	// hooli, of the second page, is stranded now: the first page warns of
	// it, and still shows its own rows only.
	e.enqueue("w_h", "hooli", now, &automatorv1.Command{Script: "h.sh"})
	ev = nextUpdate(t, events, "the live accounts page warning of hooli")
	if ev.name != "update" || !strings.Contains(ev.data, `<li data-account="hooli">`) || strings.Contains(ev.data, row("hooli")) ||
		!strings.Contains(ev.data, row("acme")) {
		t.Errorf("after a unit of hooli queued, event %q:\n%s\nwant the warning of hooli, and the rows of acme and globex alone", ev.name, ev.data)
	}
}
