//go:build linux

package replicas

import (
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAStopAndTheStartAfterItShowOnEveryReplicaAtOnce: replicas keep the
// polls they hear in memory and write them every few seconds, each its
// own. An instance's process polls r0 (kept there: not stopping), then
// stops, its last poll, saying so, reaching r1: every replica lists it
// stopped at once. The process started again polls r0, which still holds
// the old process's poll: every replica lists it online at once, not at
// r0's next write.
func TestAStopAndTheStartAfterItShowOnEveryReplicaAtOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, pgtest.DSN(t), 2)
	c.Start(t)
	token := profileValue(t, c.createAccount(t, "acme"), "token")
	proxies := []automatorv1.ProxyServiceClient{
		automatorv1.NewProxyServiceClient(c.dial(t, c.Replicas[0], token)),
		automatorv1.NewProxyServiceClient(c.dial(t, c.Replicas[1], token)),
	}
	poll := func(on int, run string, seq uint64, stopping bool) {
		t.Helper()
		_, err := proxies[on].Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "pa", RunId: run, PollSeq: seq,
			Wait: durationpb.New(0), Stopping: stopping})
		if err != nil {
			t.Fatalf("poll of %s #%d on r%d: %v", run, seq, on, err)
		}
	}
	callers := c.callers(t)
	want := func(what string, stopped bool) {
		t.Helper()
		for on, caller := range callers {
			l, err := caller.ListInstances(t.Context(), &automatorv1.ListInstancesRequest{Account: "acme"})
			if err != nil || len(l.GetInstances()) != 1 {
				t.Fatalf("%s: ListInstances on r%d: %v, %v; want one instance", what, on, l.GetInstances(), err)
			}
			if in := l.GetInstances()[0]; in.GetStopped() != stopped || in.GetOnline() == stopped {
				t.Errorf("%s: r%d lists pa stopped %v, online %v; want stopped %v, online %v", what, on, in.GetStopped(), in.GetOnline(), stopped, !stopped)
			}
		}
	}
	poll(0, "run-1", 1, false) // a new instance: written at once
	poll(0, "run-1", 2, false) // kept in r0's memory
	want("polling", false)
	poll(1, "run-1", 3, true)
	want("stopped on r1", true)
	poll(0, "run-2", 1, false)
	want("started again on r0", false)
}
