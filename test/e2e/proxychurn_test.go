//go:build linux

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
)

// The automator keeps nothing of proxies that went away: after thirty proxy
// processes, each killed (SIGKILL) or stopped (SIGTERM) in turn while its
// poll waited, it holds no more goroutines and open files than with none
// started yet, once their polls have ended (automator_polls_open).
func TestTheAutomatorHoldsNothingMoreOfProxiesThatWentAway(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	held := func() proctest.Held { return proctest.TakeHeld(t, []string{a.HTTPAddr}, nil) }
	// One proxy first, so that what the first connection of all sets up
	// once (the account's caches, the store's statements) is in the base.
	first := startProxy(t, cfg, scripts, "first")
	first.WaitPolling(t)
	first.Stop(t, 30*time.Second)
	proctest.AwaitNoOpenPolls(t, a.DataDir, "acme", 30*time.Second)
	base := held()

	for i := range 30 {
		p := startProxy(t, cfg, scripts, fmt.Sprintf("p%d", i))
		p.WaitPolling(t)
		proctest.AwaitOpenPolls(t, a.DataDir, "acme", 1, 30*time.Second)
		if i%2 == 0 {
			p.Kill(t)
		} else {
			p.Stop(t, 30*time.Second)
		}
		proctest.AwaitNoOpenPolls(t, a.DataDir, "acme", 30*time.Second)
	}
	now := proctest.AwaitNoGrowth(t, 10*time.Second, "after thirty proxies came and went", base, held, a.proc)
	t.Logf("before: %s; after thirty proxies came and went: %s", base, now)
}
