//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/disktest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// An automator whose disk fills up refuses new work with one precise
// message, keeps serving reads, and loses nothing: a unit running on a proxy
// meanwhile has its result refused for the while and posted again by the
// proxy, and once space is freed that result reaches its caller and new
// work runs.
func TestFullDiskRefusesNewWorkClearlyAndLosesNothing(t *testing.T) {
	t.Parallel()
	disk := disktest.Small(t, 16<<20)
	a := startAutomatorIn(t, disk)
	cfg := a.createAccount(t, "acme")
	scripts, dir := t.TempDir(), t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	writeScript(t, scripts, "gate.sh", `touch "$1"; while [ ! -e "$2" ] && [ -d "${2%/*}" ]; do sleep 0.05; done; echo "done $PROXY_WORK_ID"`)
	p := startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)

	c := a.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	running, err := c.Submit(ctx, &automatorv1.ExecuteRequest{Account: "acme",
		Command: &automatorv1.Command{Script: "gate.sh", Args: []string{started, release}}, Timeout: durationpb.New(80 * time.Second)})
	if err != nil {
		t.Fatalf("Submit before the disk is full: %v", err)
	}
	waitFor(t, 15*time.Second, "the unit to start", func() bool { return exists(started) })

	free := disktest.Fill(t, disk)
	const refusal = "the automator's database is out of disk space while queueing work: nothing was stored; retry once space is freed"
	r := a.Exec("--account", "acme", "gate.sh", started, release)
	if r.Code == 0 || !strings.Contains(r.Stderr, "ResourceExhausted: "+refusal) {
		t.Errorf("automator exec on a full disk: %s; want a failure saying %q", r, refusal)
	}
	_, err = c.Submit(ctx, &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "gate.sh"}})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != refusal {
		t.Errorf("Submit on a full disk: %v; want ResourceExhausted: %s", err, refusal)
	}
	// Over HTTP a full disk is the server's shortage, 507, not a 429 that
	// tells the caller to slow down, and no Retry-After: no one knows when
	// space comes back.
	adminKey, _ := os.ReadFile(filepath.Join(a.DataDir, config.FileAPIKey))
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+a.HTTPAddr+"/v1/accounts/acme/submit", strings.NewReader(`{"command": {"script": "gate.sh"}}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(adminKey)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var refused struct{ Message string }
	err = json.NewDecoder(resp.Body).Decode(&refused)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusInsufficientStorage || err != nil || refused.Message != refusal || resp.Header.Get("Retry-After") != "" {
		t.Errorf("submit over HTTP on a full disk: HTTP %d (Retry-After %q) %q, %v; want 507 without Retry-After: %s", resp.StatusCode, resp.Header.Get("Retry-After"), refused.Message, err, refusal)
	}
	if st, err := c.Get(ctx, &automatorv1.GetRequest{WorkId: running.GetWorkId()}); err != nil || st.GetState() != automatorv1.State_STATE_CLAIMED {
		t.Errorf("Get of the running unit on a full disk: %v, %v; want it, claimed", st.GetState(), err)
	}

	writeFile(t, release, "")
	waitFor(t, 15*time.Second, "the proxy to retry the result the full disk refused", func() bool {
		return strings.Contains(p.Log(), "posting the result failed; retrying until the deadline") &&
			strings.Contains(p.Log(), "out of disk space while recording a result")
	})
	free()
	st, err := waitWork(ctx, c, running.GetWorkId())
	if err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != "done "+running.GetWorkId()+"\n" {
		t.Fatalf("the running unit once space is freed: %v (%q), %v; want SUCCEEDED with its output", st.GetState(), st.GetResult().GetStdout(), err)
	}
	if r := a.Exec("--account", "acme", "gate.sh", started, release); r.Code != 0 || !strings.HasPrefix(r.Stdout, "done w_") {
		t.Errorf("automator exec once space is freed: %s; want the script's output", r)
	}
	if !strings.Contains(a.Log(), "the database is out of disk space: writes fail until space is freed") {
		t.Errorf("the automator's log does not name the full disk:\n%s", a.proc.Tail(20))
	}
}
