//go:build linux

package replicas

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestNothingGrowsWithTheUnitsServedAcrossReplicas is test/e2e's
// TestNothingGrowsWithTheUnitsServed on two replicas sharing PostgreSQL,
// where what crosses replicas is held too: the only instance polls r0, and
// half the callers call r1, so their units are queued, claimed, cancelled
// and waited for across replicas (notifications, read-backs, remote
// cancels). After a batch four times the first, over fresh connections,
// neither replica holds more goroutines or open files than after the
// first, nor the proxy more open files, and no killed script runs.
func TestNothingGrowsWithTheUnitsServedAcrossReplicas(t *testing.T) {
	// The store's pool opens its 16 connections at the start: it grows
	// with the callers' concurrency (a second batch twice as wide as the
	// first made five more on one replica), which is no leak.
	dsn, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	q := dsn.Query()
	q.Set("pool_min_conns", "16")
	dsn.RawQuery = q.Encode()
	c := newCluster(t, dsn.String(), 2)
	c.Start(t)
	profile := c.createAccount(t, "acme")
	scripts := t.TempDir()
	proctest.MixScripts(t, scripts)
	p := startProxy(t, proxyConfig(t, profile, c.Replicas[0]), scripts, "a")
	var httpAddrs []string
	for _, r := range c.Replicas {
		s, ok, err := config.ReadServing(r.DataDir)
		if err != nil || !ok {
			t.Fatalf("replica %s: serving.yaml: %v", r.ID, err)
		}
		httpAddrs = append(httpAddrs, s.HTTP)
	}
	// serve serves a batch over conns connections of its own to each
	// replica in turn, closed at its end.
	serve := func(phase string, units, conns int) {
		clients := make([]automatorv1.AutomatorServiceClient, conns)
		for i := range clients {
			conn := c.dial(t, c.Replicas[i%len(c.Replicas)], c.apiKey)
			defer conn.Close()
			clients[i] = automatorv1.NewAutomatorServiceClient(conn)
		}
		proctest.ServeMix(t, clients, "acme", phase, units)
	}
	held := func() proctest.Held { return proctest.TakeHeld(t, httpAddrs, []int{p.Pid()}) }

	const warm, counted = 16 * proctest.MixKinds, 64 * proctest.MixKinds
	serve("first batch", warm, 4)
	proctest.AwaitMixEnded(t, httpAddrs, "acme")
	base := held()
	t.Logf("after %d units: %s", warm, base)

	serve("second batch", counted, 8)
	proctest.AwaitMixEnded(t, httpAddrs, "acme")
	var automators []*proctest.Proc
	for _, r := range c.Replicas {
		automators = append(automators, r.proc)
	}
	now := proctest.AwaitNoGrowth(t, 20*time.Second, fmt.Sprintf("after %d more units than the first %d, their connections closed", counted, warm),
		base, held, automators...)
	t.Logf("after %d more units: %s", counted, now)
}
