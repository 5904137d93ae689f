//go:build linux

package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
)

// TestAnHTTPExecuteCutByShutdownNamesItsUnit: an HTTP execute waiting
// for its unit when serve shuts down is answered 503 naming the unit, so
// that its caller waits for it again by id rather than execute again
// (which, without an idempotency key, queues it a second time). The
// gateway's connection to the gRPC server closed as the shutdown began,
// and the answer, "automator shutting down; retry", named no unit (a
// review).
func TestAnHTTPExecuteCutByShutdownNamesItsUnit(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	cfg, _, err := clientConfig(s.dir, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.http+"/v1/accounts/acme/execute", strings.NewReader(`{"command": {"script": "x.sh"}, "timeout": "60s"}`))
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, string(b)}
	}()
	var id string
	automatortest.WaitFor(t, 15*time.Second, "the execute's unit to be queued", func() bool {
		_, out, _ := runMain(t, "work", "list", "--data-dir", s.dir, "--json")
		var units []struct {
			ID string `json:"work_id"`
		}
		if json.Unmarshal([]byte(out), &units) != nil || len(units) != 1 {
			return false
		}
		id = units[0].ID
		return true
	})
	s.stop()
	a := <-answered
	if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, id) {
		t.Errorf("the execute cut by the shutdown: HTTP %d %s; want 503 naming its unit %s", a.code, a.body, id)
	}
	http.DefaultClient.CloseIdleConnections()
}
