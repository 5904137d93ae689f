package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
)

// failingClaim fails every claim with an error the automator does not
// know.
type failingClaim struct{ store.Store }

func (failingClaim) WorkClaim(context.Context, store.WorkClaimParams) ([]store.Work, error) {
	return nil, errors.New("claiming work: disk I/O error")
}

// TestInternalErrorLogNamesTheCallAndItsAccount: a call that fails on an
// error of the automator's answers Internal with a generic message, and the
// log line that holds the details says which call failed and for which
// account, so the operator can tell whose work is affected.
func TestInternalErrorLogNamesTheCallAndItsAccount(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	e := newEnv(t, envOptions{log: log, wrap: func(st store.Store) store.Store { return failingClaim{st} }})
	submit(t, e.callerClient(), e.account, time.Hour)
	_, err := pollNow(e.proxyClient(), "host-a", 1)
	if status.Code(err) != codes.Internal {
		t.Fatalf("poll with the store failing claims: %v; want Internal", err)
	}
	if got := log.lines("level=ERROR", "disk I/O error"); len(got) != 1 {
		t.Fatalf("error lines: %q; want one", got)
	}
	if got := log.lines("level=ERROR", "disk I/O error", "method=ProxyService/Poll", "account=acme"); len(got) != 1 {
		t.Errorf("the error line does not name the call and its account: %q", log.lines("level=ERROR"))
	}
}
