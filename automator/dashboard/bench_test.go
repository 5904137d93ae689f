package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// BenchmarkWorkListRender renders a full page of work (100 units that ran,
// each with 64 KiB of stdout and 4 KiB of stderr) as a key that may see
// commands (admin) and as one that may not (viewer): what every refresh of
// a live work page costs; -cold, on an automator that has opened none of
// the units yet.
//
//	go test -run '^$' -bench BenchmarkWorkListRender -benchmem -count 6 ./automator/dashboard
func BenchmarkWorkListRender(b *testing.B) {
	e := newEnv(b)
	d, base := e.start(replica{opts: func(o *dashboard.Options) { o.PageSize = 100 }})
	now := e.clock.Now()
	stdout := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16)
	stderr := bytes.Repeat([]byte("warning: slow\n"), 4<<10/14)
	for i := range 100 {
		at := now.Add(time.Duration(i-100) * time.Minute)
		e.enqueue(fmt.Sprintf("w_%03d", i), "acme", at, &automatorv1.Command{Script: "report.sh", Args: []string{"--all"}})
		e.run("acme", "a-1", at.Add(time.Second), at.Add(2*time.Second),
			&automatorv1.Result{ExitCode: int32(i % 3), Stdout: stdout, Stderr: stderr})
	}
	h := d.Handler()
	// cold: each render on a new automator, which has opened nothing
	// yet (its first render, or one after a restart).
	fresh := func(b *testing.B) http.Handler {
		srv, err := server.New(server.Options{Store: e.st, MasterKey: e.master, PollWindow: pollWindow, Clock: e.clock,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		d, err := dashboard.New(dashboard.Options{Store: e.st, Opener: srv, MasterKey: e.master, PollWindow: pollWindow,
			RevealKeys: []string{"admin"}, PageSize: 100, Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return d.Handler()
	}
	for _, key := range []string{"admin", "viewer", "admin-cold", "viewer-cold"} {
		b.Run(key, func(b *testing.B) {
			cold := strings.HasSuffix(key, "-cold")
			key := strings.TrimSuffix(key, "-cold")
			c := client(b)
			e.signIn(c, base, key)
			u, err := url.Parse(base + "/dashboard/work")
			if err != nil {
				b.Fatal(err)
			}
			cookies := c.Jar.Cookies(u)
			req := httptest.NewRequest(http.MethodGet, "/dashboard/work", nil)
			for _, ck := range cookies {
				req.AddCookie(ck)
			}
			render := func(h http.Handler) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			if rec := render(h); rec.Code != http.StatusOK || bytes.Count(rec.Body.Bytes(), []byte(`<tr data-work="`)) != 100 ||
				(key == "admin") != bytes.Contains(rec.Body.Bytes(), []byte("<code>report.sh</code>")) {
				b.Fatalf("the page: %d, %d rows:\n%s", rec.Code, bytes.Count(rec.Body.Bytes(), []byte(`<tr data-work="`)), rec.Body)
			}
			b.ReportAllocs()
			for b.Loop() {
				if cold {
					b.StopTimer()
					h := fresh(b)
					b.StartTimer()
					render(h)
					continue
				}
				render(h)
			}
		})
	}
}

// BenchmarkUnitPageRender renders the page of one unit whose output is the
// largest a proxy posts (2 MiB each of stdout and stderr), as a key that
// may see it: what every refresh of that live page costs while it is open
// (an ended unit's page does not change, so nothing is sent, but it is
// read and rendered again to find that out).
//
//	go test -run '^$' -bench BenchmarkUnitPageRender -benchmem -count 6 ./automator/dashboard
func BenchmarkUnitPageRender(b *testing.B) {
	e := newEnv(b)
	d, base := e.start(replica{})
	now := e.clock.Now()
	e.enqueue("w_big", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "report.sh"})
	e.run("acme", "a-1", now.Add(-59*time.Second), now.Add(-58*time.Second), &automatorv1.Result{
		Stdout: bytes.Repeat([]byte("0123456789abcde\n"), 2<<20/16),
		Stderr: bytes.Repeat([]byte("warning: slow <\n"), 2<<20/16),
	})
	c := client(b)
	e.signIn(c, base, "admin")
	u, err := url.Parse(base + "/dashboard/work/w_big")
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/dashboard/work/w_big", nil)
	for _, ck := range c.Jar.Cookies(u) {
		req.AddCookie(ck)
	}
	h := d.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.Len() < 4<<20 {
		b.Fatalf("the page: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// manyAccounts adds n accounts (t0000, t0001, …, after acme and globex by
// name) to e's store, each with two units queued, one claimed and an
// instance that polled within the last 30 s (a poll window), but every
// 20th, whose instance polled an hour ago (stranded), and every 50th,
// whose instance is refused (stranded too, as units are queued). Their
// instances are returned, by account.
func manyAccounts(b *testing.B, e *env, n int) map[string]string {
	ctx := b.Context()
	now := e.clock.Now()
	instances := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("t%04d", i)
		k, err := crypto.NewKey(1)
		if err != nil {
			b.Fatal(err)
		}
		sealed, err := e.master.SealKey(name, k)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.st.AccountCreate(ctx, store.AccountCreateParams{Name: name, TokenHash: []byte("t-" + name), KeyID: 1, SealedKey: sealed, Now: now}); err != nil {
			b.Fatal(err)
		}
		e.keys[name] = k
		for j := range 3 {
			id := fmt.Sprintf("w_%s_%d", name, j)
			if _, err := e.st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: name, KeyID: 1, Now: now.Add(time.Duration(j-60) * time.Second),
				Deadline: now.Add(time.Hour), SealedCommand: e.seal(name, id, crypto.DirCommand, &automatorv1.Command{Script: "s.sh"}), SyncLater: true}); err != nil {
				b.Fatal(err)
			}
		}
		instance := "i-" + name
		instances[name] = instance
		p := store.InstanceSeenParams{Account: name, InstanceID: instance, Hostname: instance + ".example", Version: "v9", Now: now.Add(-time.Duration(i%30) * time.Second)}
		switch {
		case i%20 == 0:
			p.Now = now.Add(-time.Hour)
		case i%50 == 1:
			p.RefusedKeyIDs = []uint32{9}
		}
		if err := e.st.InstanceSeen(ctx, p); err != nil {
			b.Fatal(err)
		}
		if i%20 != 0 {
			if _, err := e.st.WorkClaim(ctx, store.WorkClaimParams{Account: name, InstanceID: instance, Max: 1, ClaimIDs: []string{"c"}, Now: now}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return instances
}

// BenchmarkAccountsPage measures the accounts page of an automator of 1,000
// accounts (each with units queued and claimed, and an instance): store,
// every account's statistics (what the page reads at each refresh);
// store-one, one account's (the instances page's); page, the whole page
// loaded (B/page, its bytes); instances, the whole page of one account;
// refresh, a live page's update when the clock
// moved by the 2 s of a refresh and 1/15 of the accounts polled meanwhile,
// as they do with a poll window of 30 s (B/refresh, the bytes of the
// update event the stream sends; its ns/op counts the wait for the test's
// refresh ticker too).
//
//	go test -run '^$' -bench BenchmarkAccountsPage -benchtime 20x ./automator/dashboard
func BenchmarkAccountsPage(b *testing.B) {
	e := newEnv(b)
	const accounts = 1000
	instances := manyAccounts(b, e, accounts)
	// The poll window of 30 s that the accounts' polls are spread over.
	const window = 30 * time.Second
	d, base := e.start(replica{opts: func(o *dashboard.Options) { o.Keepalive, o.PollWindow = time.Hour, window }})
	c := client(b)
	e.signIn(c, base, "admin")
	u, err := url.Parse(base + "/dashboard/")
	if err != nil {
		b.Fatal(err)
	}
	cookies := c.Jar.Cookies(u)
	since := e.clock.Now().Add(-server.InstanceOnlineWithin(window))

	b.Run("store", func(b *testing.B) {
		for b.Loop() {
			if stats, err := e.st.AccountStats(b.Context(), store.AccountStatsParams{OnlineSince: since}); err != nil || len(stats) != accounts+2 {
				b.Fatalf("AccountStats: %d, %v", len(stats), err)
			}
		}
	})
	b.Run("store-one", func(b *testing.B) {
		for b.Loop() {
			if stats, err := e.st.AccountStats(b.Context(), store.AccountStatsParams{OnlineSince: since, Account: "t0500"}); err != nil || len(stats) != 1 {
				b.Fatalf("AccountStats of t0500: %d, %v", len(stats), err)
			}
		}
	})
	b.Run("page", func(b *testing.B) {
		req := httptest.NewRequest(http.MethodGet, "/dashboard/", nil)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		h := d.Handler()
		var size int
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("the accounts page: %d", rec.Code)
			}
			size = rec.Body.Len()
		}
		b.ReportMetric(float64(size), "B/page")
	})
	b.Run("instances", func(b *testing.B) {
		req := httptest.NewRequest(http.MethodGet, "/dashboard/accounts/t0500", nil)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		h := d.Handler()
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `data-instance="i-t0500"`) {
				b.Fatalf("the page of t0500: %d\n%s", rec.Code, rec.Body)
			}
		}
	})
	b.Run("refresh", func(b *testing.B) {
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/dashboard/", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		events := make(chan event)
		go readEvents(resp.Body, events)
		defer func() {
			cancel()
			resp.Body.Close()
			for range events {
			}
		}()
		if ev := <-events; ev.name != "update" {
			b.Fatalf("first event %q", ev.name)
		}
		names := make([]string, 0, accounts)
		for i := range accounts {
			names = append(names, fmt.Sprintf("t%04d", i))
		}
		var sent, refreshes int
		next := 0
		for b.Loop() {
			b.StopTimer()
			e.clock.Add(2 * time.Second)
			now := e.clock.Now()
			for range accounts / 15 {
				name := names[next%accounts]
				next++
				e.poll(name, instances[name], now)
			}
			// acme polls last, a millisecond later: the update that shows
			// its poll shows every change of this refresh.
			marker := now.Add(time.Millisecond)
			e.poll("acme", "a-1", marker)
			want := marker.UTC().Format("2006-01-02 15:04:05.000Z")
			b.StartTimer()
			for ev := range events {
				if ev.name == "update" && strings.Contains(ev.data, want) {
					// On the wire: "event: update\n", "data: " and a
					// newline a line, and the blank line ending it.
					lines := strings.Count(ev.data, "\n") + 1
					sent += len("event: update\n") + len(ev.data) + lines*len("data: \n") - (lines - 1) + 1
					refreshes++
					break
				}
			}
		}
		b.ReportMetric(float64(sent)/float64(refreshes), "B/refresh")
	})
}
