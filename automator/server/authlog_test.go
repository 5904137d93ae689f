package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/grpcwire"
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

// TestARefusedProxyCallNamesItsInstance: a call refused for a wrong
// account token, before its request is read, names in the log and the
// audit the instance the proxy says it runs as (grpcwire.HeaderInstance):
// the peer's address alone may be a NAT's that all of a site's proxies
// share. A claimed id no instance may have (a control character) is left
// out.
func TestARefusedProxyCallNamesItsInstance(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	e := newEnv(t, envOptions{log: log})
	wrong := automatorv1.NewProxyServiceClient(e.conn("opt_wrong"))
	for _, id := range []string{"host-é 1", "bad\x1bid"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), grpcwire.HeaderInstance, id)
		if _, err := wrong.Poll(ctx, &automatorv1.PollRequest{InstanceId: id, MaxUnits: 1}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("poll with a wrong token: %v; want Unauthenticated", err)
		}
	}
	if got := log.lines("authentication failed", "invalid account token", `instance_id="host-é 1"`); len(got) != 1 {
		t.Errorf("the refusal's log line does not name instance \"host-é 1\": %q", log.lines("authentication failed"))
	}
	if got := log.lines("authentication failed", "bad"); len(got) != 0 {
		t.Errorf("a claimed instance id with a control character was logged: %q", got)
	}
	events := e.auditLog()
	if !slices.ContainsFunc(events, func(a store.AuditEvent) bool {
		return a.Kind == store.AuditAuthFailed && strings.Contains(a.Detail, "(instance host-é 1)")
	}) {
		t.Errorf("audit events %+v; want an auth failure naming the instance", events)
	}
}
