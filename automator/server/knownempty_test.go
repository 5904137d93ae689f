package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
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
	t.Parallel()
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
	t.Parallel()
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

// TestACancelWhoseAnswerWasDroppedIsToldAgain: a poll that told a proxy
// process of a cancelled unit may never deliver its answer (the proxy
// dropped that poll when a slot freed, or the connection failed). Its look
// stands in for a new one for a second, so a process still ending the
// script does not make every poll tell it again at once; after that
// second a poll still listing the unit, already waiting or new, is told
// again, not a poll window later.
func TestACancelWhoseAnswerWasDroppedIsToldAgain(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{pollWindow: time.Minute, clock: clock})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()
	req := func(seq uint64, max int32, wait time.Duration, running ...string) *automatorv1.PollRequest {
		return &automatorv1.PollRequest{InstanceId: "a", RunId: "run-1", PollSeq: seq, MaxUnits: max, Wait: durationpb.New(wait), Running: running}
	}
	poll := func(r *automatorv1.PollRequest) *automatorv1.PollResponse {
		t.Helper()
		resp, err := px.Poll(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	u := submit(t, api, e.account, time.Hour) // no poll waits: queued
	if resp := poll(req(1, 1, 0)); len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != u.GetWorkId() {
		t.Fatalf("the claiming poll: %v; want the unit %s", resp, u.GetWorkId())
	}
	if _, err := api.Cancel(ctx, &automatorv1.CancelRequest{WorkId: u.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	// This answer tells of the cancel; say the proxy never read it.
	if resp := poll(req(2, 0, 0, u.GetWorkId())); len(resp.GetCancelled()) != 1 {
		t.Fatalf("the poll after the cancel: %v; want the unit cancelled", resp)
	}
	// Within the second (the clock stands still), that look stands in.
	if resp := poll(req(3, 0, 300*time.Millisecond, u.GetWorkId())); len(resp.GetCancelled()) != 0 {
		t.Errorf("a poll right after the telling one was told again at once: %v; want the telling look to stand in for a second", resp)
	}
	// A poll waiting when the second ends is woken and told.
	waiting := make(chan pollResult, 1)
	go func() {
		resp, err := px.Poll(ctx, req(4, 0, time.Minute, u.GetWorkId()))
		waiting <- pollResult{resp, err}
	}()
	e.awaitWaiting(1)
	clock.Advance(time.Second)
	select {
	case r := <-waiting:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if c := r.resp.GetCancelled(); len(c) != 1 || c[0] != u.GetWorkId() {
			t.Errorf("the waiting poll, still listing the cancelled unit %s, answered %v; want it told again", u.GetWorkId(), r.resp)
		}
	case <-time.After(waittest.Bound):
		t.Fatalf("the waiting poll, still listing the cancelled unit, was not told again within %v", waittest.Bound)
	}
}
