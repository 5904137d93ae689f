//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// The automator and the proxy run for months: nothing they hold may grow with
// the units they serve. Two instances serve a first batch of units of every
// kind (proctest.ServeMix: so that pools, caches and threads reach their
// working size), then a batch six times larger over fresh connections; once
// the units have ended and those connections are closed, the automator holds
// no more goroutines and open files than after the first batch, the proxies
// no more open files, and no script of a cancelled or timed-out unit runs.
//
// Not parallel: like the active/active test it loads the machine, and the
// timing-sensitive tests run after it.
func TestNothingGrowsWithTheUnitsServed(t *testing.T) {
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	proctest.MixScripts(t, scripts)
	pa := startProxy(t, cfg, scripts, "a")
	pb := startProxy(t, cfg, scripts, "b")
	pa.WaitPolling(t)
	pb.WaitPolling(t)
	caPEM, err := os.ReadFile(filepath.Join(a.DataDir, config.FileCACert))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(a.DataDir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	// serve serves a batch over conns connections of its own, closed at
	// its end.
	serve := func(phase string, units, conns int) {
		clients := make([]automatorv1.AutomatorServiceClient, conns)
		for i := range clients {
			conn := proctest.Dial(t, a.GRPCAddr, caPEM, strings.TrimSpace(string(key)))
			defer conn.Close()
			clients[i] = automatorv1.NewAutomatorServiceClient(conn)
		}
		proctest.ServeMix(t, clients, "acme", phase, units)
	}
	held := func() proctest.Held {
		return proctest.TakeHeld(t, []string{a.HTTPAddr}, []int{pa.Pid(), pb.Pid()})
	}

	const warm, counted = 16 * proctest.MixKinds, 96 * proctest.MixKinds
	serve("first batch", warm, 4)
	proctest.AwaitMixEnded(t, []string{a.HTTPAddr}, "acme")
	base := held()
	t.Logf("after %d units: %s", warm, base)

	serve("second batch", counted, 8)
	proctest.AwaitMixEnded(t, []string{a.HTTPAddr}, "acme")
	now := proctest.AwaitNoGrowth(t, 20*time.Second, fmt.Sprintf("after %d more units than the first %d, their connections closed", counted, warm),
		base, held, a.proc)
	t.Logf("after %d more units: %s", counted, now)
}
