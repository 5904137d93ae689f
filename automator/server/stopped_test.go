package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAStoppingInstanceIsStoppedAtOnceInEveryListing: a proxy that stops
// gracefully says so in its last poll; from that poll on ListInstances
// shows it stopped and not online, and the account's statistics (`automator
// account list`, the dashboard, automator_instances_online) count it out,
// long before its last poll is two poll windows old. Its next poll without
// it, a second later, shows it online again at once. Both are written as
// they come, though polls are otherwise written at most every few seconds.
func TestAStoppingInstanceIsStoppedAtOnceInEveryListing(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	within := server.InstanceOnlineWithin(2 * time.Second) // newEnv's poll window
	poll := func(run string, seq uint64, stopping bool) {
		t.Helper()
		_, err := e.proxyClient().Poll(context.Background(), &automatorv1.PollRequest{
			InstanceId: "a", Wait: durationpb.New(0), RunId: run, PollSeq: seq, Stopping: stopping})
		if err != nil {
			t.Fatalf("Poll(stopping %v): %v", stopping, err)
		}
	}
	want := func(stopped bool) {
		t.Helper()
		list, err := e.callerClient().ListInstances(context.Background(), &automatorv1.ListInstancesRequest{Account: e.account})
		if err != nil || len(list.GetInstances()) != 1 {
			t.Fatalf("instances: %v, %v; want one", list.GetInstances(), err)
		}
		stats, err := e.store.AccountStats(context.Background(), store.AccountStatsParams{OnlineSince: clock.Now().Add(-within)})
		if err != nil || len(stats) != 1 {
			t.Fatalf("account statistics: %v, %v", stats, err)
		}
		in := list.GetInstances()[0]
		if in.GetStopped() != stopped || in.GetOnline() == stopped || (stats[0].InstancesOnline == 1) == stopped {
			t.Errorf("ListInstances says stopped %v, online %v; the listings count %d online; want stopped %v, online %v",
				in.GetStopped(), in.GetOnline(), stats[0].InstancesOnline, stopped, !stopped)
		}
	}
	poll("run-1", 1, false)
	want(false)
	clock.Advance(time.Second)
	poll("run-1", 2, true)
	want(true)
	// However long ago: stopped, not merely offline.
	clock.Advance(time.Hour)
	want(true)
	// Started again.
	poll("run-2", 1, false)
	want(false)
	// Stopped again, a second later, and started again a second after.
	clock.Advance(time.Second)
	poll("run-2", 2, true)
	want(true)
	clock.Advance(time.Second)
	poll("run-3", 1, false)
	want(false)
}
