package server_test

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAUnitGoesToAPollHeardFromLatelyRatherThanToOneGoneSilent: a proxy
// whose host lost power leaves its poll waiting here on a connection
// nothing closed, until the poll's window ends. A proxy pings after 10 s
// without traffic, so that connection falls silent; a unit handed to its
// poll would wait for its deadline. With a live instance's poll waiting
// too, the unit goes to that one, even though the silent one waits longer.
func TestAUnitGoesToAPollHeardFromLatelyRatherThanToOneGoneSilent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	// quietConns: nothing comes over gone's connection once its poll is in.
	e := newEnv(t, envOptions{pollWindow: time.Minute, clock: clk, quietConns: true})
	api := e.callerClient()
	gone := pollAsync(t.Context(), e.proxyClient(), "gone", 1)
	e.awaitWaiting(1)
	clk.Advance(20 * time.Second) // nothing heard from "gone" since
	live := pollAsync(t.Context(), e.proxyClient(), "live", 1)
	e.awaitWaiting(2)

	st := submit(t, api, e.account, 5*time.Minute)
	if st.GetState() != automatorv1.State_STATE_CLAIMED || st.GetInstanceId() != "live" {
		t.Fatalf("Submit answered %v by %q, want claimed by live", st.GetState(), st.GetInstanceId())
	}
	r := waittest.Recv(t, live, "the live instance's poll to answer with the unit")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("live's poll answered %v, %v; want the unit %s", r.resp, r.err, st.GetWorkId())
	}
	select {
	case r := <-gone:
		t.Fatalf("the silent instance's poll answered %v, %v; it should still wait", r.resp, r.err)
	default:
	}

	// A silent poll is not shut out: with no other waiting, the next unit
	// is handed to it (its proxy may only be slow to ping).
	next := submit(t, api, e.account, 5*time.Minute)
	if next.GetState() != automatorv1.State_STATE_CLAIMED || next.GetInstanceId() != "gone" {
		t.Fatalf("Submit answered %v by %q, want claimed by gone, the only poll waiting", next.GetState(), next.GetInstanceId())
	}
	waittest.Recv(t, gone, "the silent instance's poll to answer")
}
