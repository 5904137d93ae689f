package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAnInstanceLeftWithoutAUsableKeyIsListedRefusedNotOffline: after
// rotate-key --overlap 0, an instance still on the old profile polls and
// is refused. From its first refused poll on, ListInstances shows it
// refused, with the key ids it holds, and not online, and the account's
// statistics (`automator account list`, the dashboard,
// automator_instances_online) count it out; it does not show as gone
// while it polls. Its refused polls after that are kept in memory like
// accepted ones (its record written at the next flush); its first poll
// with the new profile is accepted and shows it online at once. Both
// changes are written as they come.
func TestAnInstanceLeftWithoutAUsableKeyIsListedRefusedNotOffline(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	// As under `automator serve`: only changes are written at once.
	e.srv.BatchPolls()
	within := server.InstanceOnlineWithin(2 * time.Second) // newEnv's poll window
	poll := func(seq uint64, keyIDs ...uint32) error {
		t.Helper()
		_, err := e.proxyClient().Poll(context.Background(), &automatorv1.PollRequest{
			InstanceId: "a", Wait: durationpb.New(0), RunId: "run-1", PollSeq: seq, KeyIds: keyIDs})
		return err
	}
	want := func(refused []uint32, lastPoll time.Time) {
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
		isRefused := len(refused) > 0
		if in.GetRefused() != isRefused || !slices.Equal(in.GetRefusedKeyIds(), refused) || in.GetOnline() == isRefused ||
			(stats[0].InstancesOnline == 1) == isRefused || !in.GetLastPollAt().AsTime().Equal(lastPoll) {
			t.Errorf("ListInstances says refused %v holding key ids %v, online %v, last poll %v; the listings count %d online; want refused %v holding %v, online %v, last poll %v",
				in.GetRefused(), in.GetRefusedKeyIds(), in.GetOnline(), in.GetLastPollAt().AsTime(), stats[0].InstancesOnline,
				isRefused, refused, !isRefused, lastPoll)
		}
	}

	if err := poll(1, 1); err != nil {
		t.Fatalf("poll holding key 1 before the rotation: %v", err)
	}
	want(nil, clock.Now())

	// rotate-key --overlap 0, by another process: seen once the keys
	// read are read again.
	clock.Advance(time.Second)
	e.rotateKey(e.account, 2, clock.Now(), clock.Now())
	clock.Advance(server.KeyCacheTTL)
	if err := poll(2, 1); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("poll holding only the withdrawn key 1: %v, want FailedPrecondition", err)
	}
	refusedAt := clock.Now()
	want([]uint32{1}, refusedAt)

	// Polling on with backoff, long past two poll windows: still refused,
	// not offline, once its polls kept in memory are written.
	clock.Advance(within + time.Minute)
	if err := poll(3, 1); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("poll holding only the withdrawn key 1, later: %v, want FailedPrecondition", err)
	}
	want([]uint32{1}, refusedAt) // no change: kept in memory
	if err := e.srv.FlushInstances(context.Background()); err != nil {
		t.Fatal(err)
	}
	want([]uint32{1}, clock.Now())

	// The latest profile installed: accepted, online at once.
	clock.Advance(time.Second)
	if err := poll(4, 2, 1); err != nil {
		t.Fatalf("poll holding the new key 2: %v", err)
	}
	want(nil, clock.Now())
}

// TestAnUnclaimedUnitsTimeoutNamesTheInstanceRefusedForWantOfAUsableKey:
// with the account's only instance polling and refused (its profile of
// before rotate-key --overlap 0), a unit that times out unclaimed says so,
// and what to do, rather than that no instance was online.
func TestAnUnclaimedUnitsTimeoutNamesTheInstanceRefusedForWantOfAUsableKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	now := time.Now()
	e.rotateKey(e.account, 2, now, now) // --overlap 0
	if _, err := pollNow(e.proxyClient(), "a", 1, 1); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("poll holding only the withdrawn key 1: %v, want FailedPrecondition", err)
	}
	want := "no instance claimed it before the deadline: no instance of account acme was online (instance a polls but holds no usable key: install the account's latest profile)"
	if got := executeUnclaimed(t, e); got != want {
		t.Errorf("reason %q\nwant %q", got, want)
	}
}
