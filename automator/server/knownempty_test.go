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
