//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
)

// TestAProxyStartedWithNohupRunsScriptsWithSIGHUPsDefault: a proxy started
// with SIGHUP ignored (nohup, or `trap "" HUP` as here) goes on ignoring
// it, but its scripts get SIGHUP's default action: they inherited the
// ignoring before (a review), so one that relies on SIGHUP (a daemon's
// reload, a child it hangs up) saw nothing.
func TestAProxyStartedWithNohupRunsScriptsWithSIGHUPsDefault(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	profile := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "ignored.sh", `grep '^SigIgn:' /proc/$$/status`)
	p := proctest.Start(t, "proxy-nohup", "/bin/sh", "-c", `trap "" HUP; exec "$0" "$@"`,
		bin.proxy, "run", "--config", profile, "--scripts-dir", scripts, "--instance-id", "nohup")
	proctest.WaitPolling(t, p, 15*time.Second)
	r := a.Exec("--account", "acme", "--timeout", "20s", "ignored.sh")
	var mask uint64
	if _, err := fmt.Sscanf(strings.TrimSpace(r.Stdout), "SigIgn: %x", &mask); r.Code != 0 || err != nil {
		t.Fatalf("exec: %v (%v)", r, err)
	}
	if mask&1 != 0 { // SIGHUP is signal 1: bit 0
		t.Errorf("a script of a proxy started ignoring SIGHUP ignores it too (SigIgn %x), want its default", mask)
	}
}
