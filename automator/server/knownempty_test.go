package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// claimCounting counts the claims that reach the store.
type claimCounting struct {
	store.Store
	claims atomic.Int64
}

func (c *claimCounting) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	c.claims.Add(1)
	return c.Store.WorkClaim(ctx, p)
}

// TestPollAfterAShortClaimDoesNotLookAgain: a claim that took fewer units
// than asked took every claimable one, so the instance's next poll (right
// after it started them) does not go to the store until a unit is queued.
func TestPollAfterAShortClaimDoesNotLookAgain(t *testing.T) {
	spy := &claimCounting{}
	e := newEnv(t, envOptions{wrap: func(st store.Store) store.Store { spy.Store = st; return spy }})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()
	submit := func() {
		t.Helper()
		if _, err := api.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	poll := func(max int32) int {
		t.Helper()
		resp, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: max, Wait: durationpb.New(0)})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetClaims())
	}

	submit()
	if n := poll(4); n != 1 {
		t.Fatalf("first poll claimed %d units, want 1", n)
	}
	before := spy.claims.Load()
	if n := poll(3); n != 0 {
		t.Fatalf("second poll claimed %d units, want 0", n)
	}
	if n := spy.claims.Load() - before; n != 0 {
		t.Errorf("the poll right after a claim of 1 of 4 reached the store %d times, want 0", n)
	}
	submit()
	if n := poll(3); n != 1 {
		t.Fatalf("a poll after another unit was queued claimed %d units, want 1", n)
	}
}

// TestACancelIsToldToEachProcessSharingAnInstanceID: two proxy processes
// may share an instance id (hosts of the same name), each with its own run
// id and running units. One process's look at its own running units says
// nothing of the other's: when a unit of the second is cancelled and the
// first looks at its units, the second's next poll is still told at once,
// not a poll window later, so that it kills the script.
func TestACancelIsToldToEachProcessSharingAnInstanceID(t *testing.T) {
	e := newEnv(t, envOptions{pollWindow: 3 * time.Second})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()
	poll := func(run string, max int32, wait time.Duration, running ...string) *automatorv1.PollResponse {
		t.Helper()
		resp, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", RunId: run, PollSeq: 1, MaxUnits: max, Wait: durationpb.New(wait), Running: running})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	claimOne := func(run string) string {
		t.Helper()
		u := submit(t, api, e.account, time.Hour) // no poll waits: queued
		resp := poll(run, 1, 0)
		if len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != u.GetWorkId() {
			t.Fatalf("%s's poll: %v; want the unit %s", run, resp, u.GetWorkId())
		}
		return u.GetWorkId()
	}
	first, second := claimOne("run-1"), claimOne("run-2")
	if _, err := api.Cancel(ctx, &automatorv1.CancelRequest{WorkId: second}); err != nil {
		t.Fatal(err)
	}
	// The first process looks at its own running unit: not cancelled.
	if resp := poll("run-1", 0, 0, first); len(resp.GetCancelled()) != 0 {
		t.Fatalf("run-1's poll: %v; want nothing cancelled", resp)
	}
	// The second, its slot busy, polls for no units: it learns of the cancel.
	start := time.Now()
	resp := poll("run-2", 0, time.Minute, second)
	if len(resp.GetCancelled()) != 1 || resp.GetCancelled()[0] != second {
		t.Errorf("run-2's poll, listing its cancelled unit %s, answered after %v: %v; want it told at once that the unit was cancelled",
			second, time.Since(start).Round(time.Millisecond), resp)
	}
}
