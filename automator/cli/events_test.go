package cli

import (
	"testing"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store/pgstore"
)

// TestEveryEventListenDeliversReachesTheServer: each kind of event the
// PostgreSQL store's Listen delivers becomes the server's event of that
// kind, with its fields; one of an unknown kind (a newer replica's) is
// dropped.
func TestEveryEventListenDeliversReachesTheServer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   pgstore.Event
		want server.Event
	}{
		{pgstore.Event{Kind: pgstore.EventWorkQueued, Account: "acme"}, server.Event{Kind: server.EventWorkQueued, Account: "acme"}},
		{pgstore.Event{Kind: pgstore.EventWorkEnded, Account: "acme", WorkID: "w_1", InstanceID: "host-a"}, server.Event{Kind: server.EventWorkEnded, Account: "acme", WorkID: "w_1", InstanceID: "host-a"}},
		{pgstore.Event{Kind: pgstore.EventRunPolled, Account: "acme", InstanceID: "host-a", RunID: "run-1", PollSeq: 7}, server.Event{Kind: server.EventRunPolled, Account: "acme", InstanceID: "host-a", RunID: "run-1", PollSeq: 7}},
		{pgstore.Event{Kind: pgstore.EventResumed}, server.Event{Kind: server.EventResumed}},
	} {
		got, ok := heard(c.in)
		if !ok || got != c.want {
			t.Errorf("heard(%+v) = %+v, %v; want %+v", c.in, got, ok, c.want)
		}
	}
	if got, ok := heard(pgstore.Event{Kind: "from-a-newer-replica", Account: "acme"}); ok {
		t.Errorf("an event of an unknown kind became %+v, want it dropped", got)
	}
}
