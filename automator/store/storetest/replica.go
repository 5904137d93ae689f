package storetest

import (
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var replicaCases = []testCase{
	{"ReplicaHeartbeatUpsertsAndReplicaListIsOrderedByID", testReplicaHeartbeatAndList},
	{"ReplicaPurgeDeletesTheReplicasNotHeardFromSinceOnly", testReplicaPurge},
}

func (f *fixture) heartbeat(p store.ReplicaHeartbeatParams) store.Replica {
	f.t.Helper()
	if err := f.s.ReplicaHeartbeat(f.ctx, p); err != nil {
		f.t.Fatalf("ReplicaHeartbeat(%q): %v", p.ReplicaID, err)
	}
	return store.Replica{ReplicaID: p.ReplicaID, Hostname: p.Hostname, Version: p.Version, StartedAt: p.StartedAt, LastSeen: p.Now}
}

func (f *fixture) wantReplicas(want []store.Replica) {
	f.t.Helper()
	got, err := f.s.ReplicaList(f.ctx)
	if err != nil {
		f.t.Fatalf("ReplicaList: %v", err)
	}
	if len(got) != len(want) {
		f.t.Fatalf("ReplicaList = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ReplicaID != w.ReplicaID || g.Hostname != w.Hostname || g.Version != w.Version ||
			!g.StartedAt.Equal(w.StartedAt) || !g.LastSeen.Equal(w.LastSeen) {
			f.t.Errorf("ReplicaList[%d] = %+v, want %+v", i, g, w)
		}
	}
}

func testReplicaHeartbeatAndList(f *fixture) {
	f.wantReplicas(nil)

	// Ids sort differently byte-wise than case-insensitively: "B" < "a".
	b := f.heartbeat(store.ReplicaHeartbeatParams{ReplicaID: "a-host-1", Hostname: "a-host", Version: "v1.0.0", StartedAt: at(0), Now: at(time.Second)})
	a := f.heartbeat(store.ReplicaHeartbeatParams{ReplicaID: "B-host-2", Hostname: "b-host", Version: "v1.0.0", StartedAt: at(time.Microsecond), Now: at(2*time.Second + 5*time.Microsecond)})
	f.wantReplicas([]store.Replica{a, b})

	// A later heartbeat updates the row in place.
	b = f.heartbeat(store.ReplicaHeartbeatParams{ReplicaID: "a-host-1", Hostname: "a-host", Version: "v1.0.0", StartedAt: at(0), Now: at(time.Minute + 7*time.Microsecond)})
	f.wantReplicas([]store.Replica{a, b})

	// A restart under the same id (a new version, a new start) replaces it.
	b = f.heartbeat(store.ReplicaHeartbeatParams{ReplicaID: "a-host-1", Hostname: "a-host", Version: "v1.1.0", StartedAt: at(time.Hour), Now: at(time.Hour + time.Second)})
	f.wantReplicas([]store.Replica{a, b})
}

func testReplicaPurge(f *fixture) {
	old := f.heartbeat(store.ReplicaHeartbeatParams{ReplicaID: "old", Hostname: "h", Version: "v1", StartedAt: at(0), Now: at(time.Hour)})
	edge := f.heartbeat(store.ReplicaHeartbeatParams{ReplicaID: "edge", Hostname: "h", Version: "v1", StartedAt: at(0), Now: at(2 * time.Hour)})
	recent := f.heartbeat(store.ReplicaHeartbeatParams{ReplicaID: "recent", Hostname: "h", Version: "v1", StartedAt: at(0), Now: at(3 * time.Hour)})
	f.wantReplicas([]store.Replica{edge, old, recent})

	n, err := f.s.ReplicaPurge(f.ctx, store.ReplicaPurgeParams{SeenBefore: at(2 * time.Hour)})
	if err != nil || n != 1 {
		f.t.Fatalf("ReplicaPurge = %d, %v; want the one replica last seen before the cut", n, err)
	}
	f.wantReplicas([]store.Replica{edge, recent})

	// A purged replica that beats again is listed again.
	old = f.heartbeat(store.ReplicaHeartbeatParams{ReplicaID: "old", Hostname: "h", Version: "v2", StartedAt: at(4 * time.Hour), Now: at(4 * time.Hour)})
	f.wantReplicas([]store.Replica{edge, old, recent})
}
