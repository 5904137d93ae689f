//go:build linux

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// instanceStates returns each instance's status and online as `automator
// instances --json` lists them.
func (a *automator) instanceStates(t *testing.T, account string) map[string]string {
	t.Helper()
	r := runCLI(bin.automator, "instances", "--data-dir", a.DataDir, "--account", account, "--json")
	if r.Code != 0 {
		t.Fatalf("automator instances: %v", r)
	}
	var list []struct {
		InstanceID string `json:"instance_id"`
		Online     bool   `json:"online"`
		Status     string `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("automator instances --json: %v\n%s", err, r.Stdout)
	}
	out := map[string]string{}
	for _, in := range list {
		if in.Online != (in.Status == "online") {
			t.Errorf("automator instances --json: %s has online %v and status %q", in.InstanceID, in.Online, in.Status)
		}
		out[in.InstanceID] = in.Status
	}
	return out
}

// accountOnline returns the status and instances online of account as
// `automator account list --json` lists them.
func (a *automator) accountOnline(t *testing.T, account string) (string, int) {
	t.Helper()
	r := runCLI(bin.automator, "account", "list", "--data-dir", a.DataDir, "--json")
	if r.Code != 0 {
		t.Fatalf("automator account list: %v", r)
	}
	var list []struct {
		Account         string `json:"account"`
		Status          string `json:"status"`
		InstancesOnline int    `json:"instances_online"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("automator account list --json: %v\n%s", err, r.Stdout)
	}
	for _, l := range list {
		if l.Account == account {
			return l.Status, l.InstancesOnline
		}
	}
	t.Fatalf("automator account list --json lacks %s:\n%s", account, r.Stdout)
	return "", 0
}

// onlineMetric returns the line of automator_instances_online of account
// in the automator's /metrics.
func (a *automator) onlineMetric(t *testing.T, account string) string {
	t.Helper()
	return a.accountGauge(t, "automator_instances_online", account)
}

// accountGauge returns the line of the per-account gauge name of account
// in the automator's /metrics.
func (a *automator) accountGauge(t *testing.T, name, account string) string {
	t.Helper()
	resp, err := http.Get("http://" + a.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	prefix := name + `{account="` + account + `"} `
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("/metrics lacks %s:\n%s", prefix, body)
	return ""
}

// A proxy stopped gracefully (SIGTERM, as a service stop) says so in its
// last poll: the listings show it stopped, and its account with no
// instance online, as soon as it has exited, not two poll windows (66 s)
// later. Started again, it is online again as soon as it polls.
func TestAGracefullyStoppedProxyIsShownStoppedAtOnce(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()

	p := startProxy(t, cfg, scripts, "p1")
	p.WaitPolling(t) // its first poll was answered, so recorded
	if got := a.instanceStates(t, "acme"); got["p1"] != "online" {
		t.Fatalf("instances while p1 polls: %v; want p1 online", got)
	}
	if status, n := a.accountOnline(t, "acme"); status != "online" || n != 1 {
		t.Fatalf("account acme while p1 polls: %s, %d online; want online, 1", status, n)
	}
	if got := a.onlineMetric(t, "acme"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("while p1 polls: %s; want 1", got)
	}

	if code := p.Stop(t, 30*time.Second); code != 0 {
		t.Fatalf("proxy exited %d after SIGTERM, want 0\n%s", code, p.Log())
	}
	// No waiting: the stop's poll was answered before the proxy exited.
	if got := a.instanceStates(t, "acme"); got["p1"] != "stopped" {
		t.Errorf("instances right after p1 stopped: %v; want p1 stopped", got)
	}
	if status, n := a.accountOnline(t, "acme"); status != "offline" || n != 0 {
		t.Errorf("account acme right after p1 stopped: %s, %d online; want offline, 0", status, n)
	}
	if got := a.onlineMetric(t, "acme"); !strings.HasSuffix(got, " 0") {
		t.Errorf("right after p1 stopped: %s; want 0", got)
	}

	again := startProxy(t, cfg, scripts, "p1")
	again.WaitPolling(t)
	if got := a.instanceStates(t, "acme"); got["p1"] != "online" {
		t.Errorf("instances once p1 polls again: %v; want p1 online", got)
	}
	if status, n := a.accountOnline(t, "acme"); status != "online" || n != 1 {
		t.Errorf("account acme once p1 polls again: %s, %d online; want online, 1", status, n)
	}
}
