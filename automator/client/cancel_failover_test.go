package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestInterruptedWaitOnAHungAutomatorCancelsTheUnitOnTheNext: the caller's
// context ends while it waits on an automator that hangs (stopped, frozen:
// its connection open, nothing answered). ExecuteOnProxy cancels the unit,
// and a cancel, like a submit or a read, gives a hung automator up after
// tryBound (10 s) for the next address (docs/api.md), which cancels it.
// Before, the cancel's whole budget was one try on the hung automator, and
// the unit was left to run.
func TestInterruptedWaitOnAHungAutomatorCancelsTheUnitOnTheNext(t *testing.T) {
	t.Parallel()
	a, waits := startTellingWaits(t)
	r := startRelay(t, a.GRPCAddr)
	c := newClient(t, a, r.url(), a.URL())
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ExecuteOnProxy(ctx, a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(time.Minute))
		done <- err
	}()
	id := waittest.Recv(t, waits, "the wait to reach the automator")
	r.hang()
	interrupt()
	var err error
	select {
	case err = <-done:
	case <-time.After(25 * time.Second):
		t.Fatal("ExecuteOnProxy still runs 25 s after its context ended")
	}
	w, gerr := a.Store.WorkGet(context.Background(), id)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if !errors.Is(err, client.ErrCancelled) || !errors.Is(err, context.Canceled) || w.State != "cancelled" {
		t.Fatalf("ExecuteOnProxy interrupted while its automator hangs: %v; unit %s is %s; want it cancelled on the next address", err, id, w.State)
	}
}
