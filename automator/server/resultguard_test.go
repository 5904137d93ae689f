package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// completeCounter counts the store's WorkComplete calls.
type completeCounter struct {
	store.Store
	completes atomic.Int64
}

func (c *completeCounter) WorkComplete(ctx context.Context, p store.WorkCompleteParams) (store.Work, error) {
	c.completes.Add(1)
	return c.Store.WorkComplete(ctx, p)
}

// TestAFloodOfResultsForUnitsThatAreNotThereStopsReachingTheWriter: a
// result is written without being read first, so each result a token's
// holder makes up (a work id of no unit) cost a write transaction of the
// store's one writer, 256 per CompleteBatch, and a flood of them held up
// every account's enqueues and completions. Once more than 64 of an
// account's results are refused within a second, its results are read
// first: made-up ones are refused from the read, each as before
// (NOT_FOUND), without a write; a real result is still recorded.
func TestAFloodOfResultsForUnitsThatAreNotThereStopsReachingTheWriter(t *testing.T) {
	t.Parallel()
	clock := newFakeClock() // one second for the whole flood
	counter := &completeCounter{}
	e := newEnv(t, envOptions{clock: clock, wrap: func(st store.Store) store.Store { counter.Store = st; return counter }})
	proxy := e.proxyClient()
	bogus := func(batch int) *automatorv1.CompleteBatchRequest {
		req := &automatorv1.CompleteBatchRequest{}
		for i := range 256 {
			req.Results = append(req.Results, &automatorv1.CompleteRequest{
				WorkId: fmt.Sprintf("w_bogus_%d_%d", batch, i), ClaimId: "c_x", Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "x"})
		}
		return req
	}
	for batch := range 4 {
		resp, err := proxy.CompleteBatch(t.Context(), bogus(batch))
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range resp.GetOutcomes() {
			if codes.Code(o.GetCode()) != codes.NotFound {
				t.Fatalf("batch %d, result %d for a unit that is not there: %v %q; want NotFound", batch, i, codes.Code(o.GetCode()), o.GetMessage())
			}
		}
	}
	// The first batch is written before any of it is refused; the others
	// are read first.
	if n := counter.completes.Load(); n > 256 {
		t.Errorf("1,024 results for units that are not there, in one second, made %d writes; want at most the first batch's 256", n)
	}

	st := submitScript(t, e.callerClient(), e.account, "real.sh", time.Hour)
	c := claimOne(t, proxy, "i", 1)
	if _, err := proxy.Complete(t.Context(), &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "real"}); err != nil {
		t.Fatalf("a real result while the account's results are read first: %v", err)
	}
	got, err := e.callerClient().Get(t.Context(), &automatorv1.GetRequest{WorkId: st.GetWorkId()})
	if err != nil || got.GetState() != automatorv1.State_STATE_FAILED {
		t.Fatalf("the unit after its real result: %v, %v; want failed", got.GetState(), err)
	}
}
