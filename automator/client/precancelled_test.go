package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/store"
)

// TestExecuteOnProxyWithAnEndedContextQueuesNothing: a caller whose
// context has already ended (an interrupted program, a request whose
// client left) must not queue the command: submit awaits a try that was on
// its way when the context ended, but begins none after (client.go). A
// unit queued then cancelled could be claimed, and its script started, in
// between.
func TestExecuteOnProxyWithAnEndedContextQueuesNothing(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	c := newClient(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.ExecuteOnProxy(ctx, a.Account, client.Command{Script: "x.sh"})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("ExecuteOnProxy with an ended context = %v, want context.Canceled", err)
	}
	ws, lerr := a.Store.WorkList(context.Background(), store.WorkListParams{Limit: 10})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(ws) != 0 {
		t.Fatalf("ExecuteOnProxy with an ended context queued %d unit(s) (%s: %s); want none", len(ws), ws[0].ID, ws[0].State)
	}
}
