package dashboard_test

import (
	"bytes"
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
