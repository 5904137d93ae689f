package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestExpiredTokenLogNamesItsAccount: a proxy polling with a token that a
// rotation has expired is refused, and the automator's log line says which
// account's proxy it is (the reason tells its operator to install the
// account's new profile, which one they cannot otherwise tell).
func TestExpiredTokenLogNamesItsAccount(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, log: log})
	old := e.proxyClient()
	e.rotateToken(time.Hour)
	clock.Advance(2 * time.Hour)
	_, err := old.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "host-a", MaxUnits: 1})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("poll with the expired token: %v; want Unauthenticated", err)
	}
	if got := log.lines("authentication failed", "token expired"); len(got) != 1 {
		t.Fatalf("log lines of the refusal: %q; want one", got)
	}
	if got := log.lines("authentication failed", "token expired", "account:acme"); len(got) != 1 {
		t.Errorf("the refusal's log line does not name account acme: %q", log.lines("authentication failed"))
	}
}
