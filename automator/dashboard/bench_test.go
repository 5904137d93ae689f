package dashboard_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/dashboard"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// BenchmarkWorkListRender renders a full page of work (100 units that ran,
// each with 64 KiB of stdout and 4 KiB of stderr) as a key that may see
// commands (admin) and as one that may not (viewer): what every refresh of
// a live work page costs.
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
	for _, key := range []string{"admin", "viewer"} {
		b.Run(key, func(b *testing.B) {
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
			render := func() *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			if rec := render(); rec.Code != http.StatusOK || bytes.Count(rec.Body.Bytes(), []byte(`<tr data-work="`)) != 100 {
				b.Fatalf("the page: %d, %d rows", rec.Code, bytes.Count(rec.Body.Bytes(), []byte(`<tr data-work="`)))
			}
			b.ReportAllocs()
			for b.Loop() {
				render()
			}
		})
	}
}
