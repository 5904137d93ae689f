package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/client"
)

// TestExecuteOnProxyGivenUpTellsItsUnitsDeadline: an ExecuteOnProxy whose
// automator goes away while it waits gives up, RetryFor past the unit's
// deadline, with an error that is not the unit's outcome, and its Result
// names the unit and its deadline on this process's clock, so that the
// caller can tell whether the unit may still run (automator exec does).
// Before, the deadline was not told, and exec said "may still run" of a
// unit a minute past it.
func TestExecuteOnProxyGivenUpTellsItsUnitsDeadline(t *testing.T) {
	t.Parallel()
	a, waits := startTellingWaits(t)
	r := startRelay(t, a.GRPCAddr)
	c, err := client.New(client.Config{Addresses: []string{r.url()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const timeout = 3 * time.Second
	go func() {
		// No proxy claims the unit: the automator holds the wait, and
		// goes away under it.
		<-waits
		r.close()
	}()
	start := time.Now()
	res, err := c.ExecuteOnProxy(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(timeout))
	end := time.Now()
	var we *client.WorkError
	if err == nil || errors.As(err, &we) || res.WorkID == "" {
		t.Fatalf("ExecuteOnProxy: %+v, %v; want the unit named and an error that is not its outcome", res, err)
	}
	if d := res.LocalDeadline; d.Before(start.Add(timeout)) || d.After(end) {
		t.Errorf("Result.LocalDeadline %v; want the unit's deadline on this clock, between %v (its call began plus its timeout) and %v (the call gave up)", d.Format(time.StampMilli), start.Add(timeout).Format(time.StampMilli), end.Format(time.StampMilli))
	}
}
