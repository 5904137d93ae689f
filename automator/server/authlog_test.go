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
	for _, id := range []string{"host-é 1", "bad\x1bid", "bad\xff\xfeid"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), grpcwire.HeaderInstance, id)
		if _, err := wrong.Poll(ctx, &automatorv1.PollRequest{InstanceId: "x", MaxUnits: 1}); status.Code(err) != codes.Unauthenticated { // the header names it
			t.Fatalf("poll with a wrong token: %v; want Unauthenticated", err)
		}
	}
	if got := log.lines("authentication failed", "invalid account token", `instance_id="host-é 1"`); len(got) != 1 {
		t.Errorf("the refusal's log line does not name instance \"host-é 1\": %q", log.lines("authentication failed"))
	}
	if got := log.lines("authentication failed", "instance_id=", "bad"); len(got) != 0 {
		t.Errorf("a claimed instance id with a control character, or not UTF-8, was logged: %q", got)
	}
	// A caller's call names no instance, whatever header it sends.
	ctx := metadata.AppendToOutgoingContext(context.Background(), grpcwire.HeaderInstance, "caller-says-p1")
	if _, err := automatorv1.NewAutomatorServiceClient(e.conn("oak_wrong")).Get(ctx, &automatorv1.GetRequest{WorkId: "w_0123456789abcdef0123456789abcdef"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a caller's call with a wrong API key: %v; want Unauthenticated", err)
	}
	if got := log.lines("caller-says-p1"); len(got) != 0 {
		t.Errorf("a caller's refused call named the instance its header claims: %q", got)
	}
	events := e.auditLog()
	for _, a := range events {
		if strings.Contains(a.Detail, "bad") || strings.Contains(a.Detail, "caller-says") {
			t.Errorf("audit detail %q names an instance that should have been left out", a.Detail)
		}
	}
	if !slices.ContainsFunc(events, func(a store.AuditEvent) bool {
		return a.Kind == store.AuditAuthFailed && strings.Contains(a.Detail, "(instance host-é 1)")
	}) {
		t.Errorf("audit events %+v; want an auth failure naming the instance", events)
	}
}
