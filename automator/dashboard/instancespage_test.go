package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/store"
)

// TestTheInstancesPageShowsAPageOfInstancesAndCountsThemByStatus: an
// account's page lists InstancesPageSize of its instances by id a page,
// with links to the next page and back to the first, above them how many
// it has of each status, each a link to those alone (paged too), and its
// live page sends the page it was opened on: an account's token holder
// may record thousands of instance ids, and the whole list made pages of
// megabytes at every refresh.
func TestTheInstancesPageShowsAPageOfInstancesAndCountsThemByStatus(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	for _, id := range []string{"a-1", "b-1", "c-1"} {
		e.poll("acme", id, now.Add(-time.Hour)) // offline
	}
	e.poll("acme", "a-2", now)
	e.poll("acme", "b-2", now)
	if err := e.st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: "c-2", Hostname: "c-2.example",
		Version: "v9", Stopping: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	_, base := e.start(replica{opts: func(o *dashboard.Options) { o.InstancesPageSize = 2 }})
	c := client(t)
	e.signIn(c, base, "viewer")

	row := func(id string) string { return `<tr data-instance="` + id + `"` }
	counts := []string{`<b>all 6</b>`, `<a data-status="online" href="/dashboard/accounts/acme?status=online">2 online</a>`,
		`<span class="muted">0 refused</span>`, `<a data-status="stopped" href="/dashboard/accounts/acme?status=stopped">1 stopped</a>`,
		`<a data-status="offline" href="/dashboard/accounts/acme?status=offline">3 offline</a>`}
	for _, page := range []struct {
		url       string
		rows      []string
		want      []string
		lastLinks string // a link the page must not have
	}{
		{"/dashboard/accounts/acme", []string{"a-1", "a-2"}, append([]string{`instances 1 to 2 of 6`,
			`<a id="instances-next" href="/dashboard/accounts/acme?after=a-2">`}, counts...), `id="instances-first"`},
		{"/dashboard/accounts/acme?after=a-2", []string{"b-1", "b-2"}, append([]string{`instances 3 to 4 of 6`,
			`<a id="instances-first" href="/dashboard/accounts/acme">`, `<a id="instances-next" href="/dashboard/accounts/acme?after=b-2">`}, counts...), ""},
		{"/dashboard/accounts/acme?after=b-2", []string{"c-1", "c-2"}, append([]string{`instances 5 to 6 of 6`,
			`<a id="instances-first" href="/dashboard/accounts/acme">`}, counts...), `id="instances-next"`},
		{"/dashboard/accounts/acme?status=offline", []string{"a-1", "b-1"}, []string{`offline instances 1 to 2 of 3`,
			`<a id="instances-next" href="/dashboard/accounts/acme?after=b-1&amp;status=offline">`, `<a id="instances-all" href="/dashboard/accounts/acme">all 6</a>`,
			`<b>3 offline</b>`}, `id="instances-first"`},
		{"/dashboard/accounts/acme?after=b-1&status=offline", []string{"c-1"}, []string{`offline instances 3 to 3 of 3`,
			`<a id="instances-first" href="/dashboard/accounts/acme?status=offline">`}, `id="instances-next"`},
		{"/dashboard/accounts/acme?status=online", []string{"a-2", "b-2"}, []string{`<b>2 online</b>`}, `id="instances-next"`},
		{"/dashboard/accounts/acme?status=refused", nil, []string{`No instance of acme is refused.`}, `<table id="instances">`},
		{"/dashboard/accounts/acme?after=zzz", nil, []string{`No instance after zzz.`, `<a id="instances-first" href="/dashboard/accounts/acme">`}, `<table id="instances">`},
	} {
		code, body := get(t, c, base+page.url)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", page.url, code, body)
		}
		if got, want := strings.Count(body, `<tr data-instance="`), len(page.rows); got != want {
			t.Errorf("%s shows %d instances; want %d (%q):\n%s", page.url, got, want, page.rows, body)
		}
		for _, id := range page.rows {
			if !strings.Contains(body, row(id)) {
				t.Errorf("%s lacks the row of %s:\n%s", page.url, id, body)
			}
		}
		for _, want := range page.want {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %s:\n%s", page.url, want, body)
			}
		}
		if page.lastLinks != "" && strings.Contains(body, page.lastLinks) {
			t.Errorf("%s has %s:\n%s", page.url, page.lastLinks, body)
		}
	}
	if code, body := get(t, c, base+"/dashboard/accounts/acme?after=%FF%FE"); code != http.StatusBadRequest || !strings.Contains(body, `is not an instance id`) {
		t.Errorf("GET ?after=%%FF%%FE: %d\n%s\nwant 400, not an instance id", code, body)
	}
	if code, body := get(t, c, base+"/dashboard/accounts/acme?status=gone"); code != http.StatusBadRequest || !strings.Contains(body, `&#34;gone&#34; is not an instance status`) {
		t.Errorf("GET ?status=gone: %d\n%s\nwant 400, not an instance status", code, body)
	}

	events := openStream(t, c, base+"/dashboard/accounts/acme?after=a-2")
	t.Cleanup(func() {
		go func() {
			for range events {
			}
		}()
	})
	ev := nextUpdate(t, events, "the live page of acme's second page of instances")
	if ev.name != "update" || !strings.Contains(ev.data, row("b-1")) || !strings.Contains(ev.data, row("b-2")) ||
		strings.Count(ev.data, `<tr data-instance="`) != 2 {
		t.Fatalf("first event %q:\n%s\nwant the rows of b-1 and b-2 alone", ev.name, ev.data)
	}
}
