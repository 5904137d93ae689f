//go:build linux

package e2e

import (
	"syscall"
	"testing"
	"time"
)

// An instance whose host froze (or lost power) leaves its poll waiting on
// the automator on a connection nothing closed. It polled before the live
// instance, so its poll has waited longest; but it has sent nothing since
// (a proxy pings after 10 s without traffic), and the automator hands the
// unit to the live instance's poll instead of to the silent one, where it
// would have waited for its deadline.
func TestAFrozenInstancesWaitingPollIsPassedOverForALiveOne(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "who.sh", `echo "$PROXY_INSTANCE_ID"`)
	frozen := startProxy(t, cfg, scripts, "frozen")
	frozen.WaitPolling(t)
	live := startProxy(t, cfg, scripts, "live")
	live.WaitPolling(t)

	frozen.Signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { frozen.Signal(t, syscall.SIGCONT) })
	// Not a wait for an event: the silence itself is what is tested. 15 s
	// without anything from its connection makes a poll silent; the
	// frozen proxy's last ping came at most 10 s before it stopped, and
	// its poll's window (30 s) has not ended yet.
	time.Sleep(16 * time.Second)

	r := a.Exec("--account", "acme", "--timeout", "10s", "who.sh")
	if r.Code != 0 || r.Stdout != "live\n" {
		t.Fatalf("exec: %v; want the live instance to run it (stdout \"live\\n\", exit 0)", r)
	}
}
