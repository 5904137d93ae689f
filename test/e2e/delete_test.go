//go:build linux

package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAccountDeleteFromTheCLI: `account delete` run beside a serving
// automator answers the callers waiting for the account's running and
// queued units at once (cancelled, saying why), its proxy kills the script
// it was running for it and is refused from then on, and the account is
// unknown to callers; the name, used again, is a new account served by its
// own proxy only.
func TestAccountDeleteFromTheCLI(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	oldProfile := a.createAccount(t, "acme")
	scripts, tmp := t.TempDir(), t.TempDir()
	gate, started := filepath.Join(tmp, "gate"), filepath.Join(tmp, "started")
	writeScript(t, scripts, "wait.sh", `echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; while [ ! -e "$2" ] && [ -d "${2%/*}" ]; do sleep 0.05; done; echo released`)
	writeScript(t, scripts, "who.sh", `echo "$PROXY_INSTANCE_ID"`)
	db := openDB(t, a)

	old := startProxy(t, withSettings(t, oldProfile, "max_concurrency: 1"), scripts, "old")
	old.WaitPolling(t)
	// Deadlines far off: the callers must not be answered by them.
	running := a.StartExec(t, "--account", "acme", "--timeout", "10m", "wait.sh", started, gate)
	waitFor(t, 15*time.Second, "the proxy to run wait.sh", func() bool { return exists(started) })
	pid := readPIDs(t, started)[0]
	waiting := a.StartExec(t, "--account", "acme", "--timeout", "10m", "who.sh")
	waitFor(t, 15*time.Second, "a unit to be queued behind the running one", func() bool { return queued(t, db) == 1 })

	r := runCLI(bin.automator, "account", "delete", "acme", "--data-dir", a.DataDir)
	if r.Code != 0 || !strings.Contains(r.Stdout, "units cancelled (queued or claimed): 2\n") {
		t.Fatalf("account delete acme: %v; want it to say it cancelled 2 units", r)
	}
	for what, x := range map[string]*bgExec{"running": running, "queued": waiting} {
		res := x.Wait(t, 30*time.Second)
		if res.Code != 126 || !strings.Contains(res.Stderr, `account "acme" was deleted`) {
			t.Errorf("exec of the %s unit when its account was deleted: %v; want exit 126 (cancelled) saying why", what, res)
		}
	}
	// Its proxy heard of the cancel in the poll the deletion ended (it
	// polls for no units while its one slot is busy) and killed the script.
	// Its line follows the tree's end, and may follow the refusal's.
	waitFor(t, 15*time.Second, "the script of the deleted account's unit to be killed", func() bool { return processGone(pid) })
	waitFor(t, 15*time.Second, "the old proxy's log to say it killed the cancelled unit's script", func() bool {
		return strings.Contains(old.Log(), "unit ended on the automator: process tree killed")
	})
	waitFor(t, 15*time.Second, "the deleted account's proxy to be refused", func() bool {
		return strings.Contains(old.Log(), "refused this proxy's token")
	})
	if r := a.Exec("--account", "acme", "--timeout", "10s", "who.sh"); r.Code != 255 || !strings.Contains(r.Stderr, `account "acme" not found`) {
		t.Errorf("exec on the deleted account: %v; want exit 255, not found", r)
	}
	if r := runCLI(bin.automator, "account", "delete", "acme", "--data-dir", a.DataDir); r.Code != 255 || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, `account "acme" not found`) {
		t.Errorf("account delete of the deleted account: %v; want exit 255 and one line", r)
	}

	// The name, used again, is a new account: its proxy runs its units;
	// the old proxy, still on the old profile, gets none.
	newProfile := a.createAccount(t, "acme")
	startProxy(t, newProfile, scripts, "new").WaitPolling(t)
	for range 3 {
		if r := a.Exec("--account", "acme", "--timeout", "30s", "who.sh"); r.Code != 0 || r.Stdout != "new\n" {
			t.Fatalf("exec on the account created again: %v; want it run by the new profile's proxy", r)
		}
	}
	if strings.Contains(old.Log(), "posting the result") {
		t.Errorf("the old proxy posted a result for the unit it was told had ended:\n%s", old.Log())
	}
}
