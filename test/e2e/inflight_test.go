//go:build linux

package e2e

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

// inFlight returns each instance's IN FLIGHT as `automator instances --json`
// lists it.
func (a *automator) inFlight(t *testing.T, account string) map[string]int {
	t.Helper()
	r := runCLI(bin.automator, "instances", "--data-dir", a.DataDir, "--account", account, "--json")
	if r.Code != 0 {
		t.Fatalf("automator instances: %v", r)
	}
	var list []struct {
		InstanceID string `json:"instance_id"`
		InFlight   int    `json:"in_flight"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("automator instances --json: %v\n%s", err, r.Stdout)
	}
	out := map[string]int{}
	for _, in := range list {
		out[in.InstanceID] = in.InFlight
	}
	return out
}

// An instance's IN FLIGHT is the units it holds claimed now: a proxy killed
// with SIGKILL while it runs two units shows them until they time out, then
// 0; a proxy that ran a unit and is idle shows 0.
func TestAKilledProxysUnitsAreInFlightUntilTheyEnd(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	runs := filepath.Join(t.TempDir(), "runs.log")
	killPIDFilesAtCleanup(t, runs) // the pid is the last field of each line
	writeScript(t, scripts, "hold.sh", `echo "$PROXY_WORK_ID $PROXY_INSTANCE_ID $$" >> "$1"
exec sleep 60`)
	writeScript(t, scripts, "quick.sh", `echo done`)

	dead := startProxy(t, withSettings(t, cfg, "max_concurrency: 2"), scripts, "dead")
	dead.WaitPolling(t)
	held := []*bgExec{
		a.StartExec(t, "--account", "acme", "--timeout", "15s", "hold.sh", runs),
		a.StartExec(t, "--account", "acme", "--timeout", "15s", "hold.sh", runs),
	}
	waitFor(t, 10*time.Second, "both units to start on dead", func() bool { return len(lines(runs)) == 2 })
	dead.Kill(t) // its reaper kills the scripts; nothing posts their results

	// idle runs a unit to its end (dead, full then gone, takes none).
	idle := startProxy(t, cfg, scripts, "idle")
	idle.WaitPolling(t)
	if r := a.Exec("--account", "acme", "quick.sh"); r.Code != 0 || r.Stdout != "done\n" {
		t.Fatalf("exec quick.sh: %v; want it run by idle", r)
	}
	if got := a.inFlight(t, "acme"); len(got) != 2 || got["dead"] != 2 || got["idle"] != 0 {
		t.Errorf("in flight while dead's units are claimed: %v; want dead 2, idle 0", got)
	}

	for _, bg := range held {
		if r := bg.Wait(t, 30*time.Second); r.Code != 124 {
			t.Fatalf("exec hold.sh: %v; want exit 124 (timed out)", r)
		}
	}
	if got := a.inFlight(t, "acme"); len(got) != 2 || got["dead"] != 0 || got["idle"] != 0 {
		t.Errorf("in flight once dead's units timed out: %v; want 0 for both", got)
	}
}
