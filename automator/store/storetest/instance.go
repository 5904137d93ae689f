package storetest

import (
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var instanceCases = []testCase{
	{"InstanceSeenUpsertsAndInstanceListIsOrderedByID", testInstanceSeenAndList},
	{"InstancesSeenUpsertsABatchAndNeverMovesARecordBack", testInstancesSeenBatch},
	{"InstancePurgeForgetsInstancesThatStoppedPolling", testInstancePurge},
}

func (f *fixture) seen(p store.InstanceSeenParams) {
	f.t.Helper()
	if err := f.s.InstanceSeen(f.ctx, p); err != nil {
		f.t.Fatalf("InstanceSeen(%q, %q): %v", p.Account, p.InstanceID, err)
	}
}

func (f *fixture) wantInstances(account string, want []store.Instance) {
	f.t.Helper()
	got, err := f.s.InstanceList(f.ctx, account)
	if err != nil {
		f.t.Fatalf("InstanceList(%q): %v", account, err)
	}
	if len(got) != len(want) {
		f.t.Fatalf("InstanceList(%q) = %+v, want %+v", account, got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Account != w.Account || g.InstanceID != w.InstanceID || g.Hostname != w.Hostname ||
			g.Version != w.Version || !g.LastPollAt.Equal(w.LastPollAt) || g.InFlight != w.InFlight {
			f.t.Errorf("InstanceList(%q)[%d] = %+v, want %+v", account, i, g, w)
		}
	}
}

func testInstanceSeenAndList(f *fixture) {
	f.account("acme")
	f.account("globex")
	f.wantInstances("acme", nil)

	seen := func(account, id, version string, inFlight int, now time.Time) store.Instance {
		p := store.InstanceSeenParams{
			Account:    account,
			InstanceID: id,
			Hostname:   fmt.Sprintf("%s.%s.example", id, account),
			Version:    version,
			InFlight:   inFlight,
			Now:        now,
		}
		f.seen(p)
		return store.Instance{Account: account, InstanceID: id, Hostname: p.Hostname, Version: version, LastPollAt: now, InFlight: inFlight}
	}
	b := seen("acme", "b-host", "v1.0.0", 0, at(time.Second))
	a := seen("acme", "a-host", "v1.0.0", 3, at(2*time.Second+5*time.Microsecond))
	other := seen("globex", "a-host", "v0.9.0", 1, at(3*time.Second))
	f.wantInstances("acme", []store.Instance{a, b})

	// A later poll of the same instance updates it in place.
	b = seen("acme", "b-host", "v1.1.0", 4, at(time.Minute+time.Microsecond))
	f.wantInstances("acme", []store.Instance{a, b})
	f.wantInstances("globex", []store.Instance{other})
	f.wantInstances("nobody", nil)
}

func testInstancesSeenBatch(f *fixture) {
	f.account("acme")
	f.account("globex")
	if err := f.s.InstancesSeen(f.ctx, nil); err != nil {
		f.t.Fatalf("InstancesSeen(nil): %v", err)
	}
	f.wantInstances("acme", nil)

	p := func(account, id, version string, inFlight int, now time.Time) store.InstanceSeenParams {
		return store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id + ".example",
			Version: version, InFlight: inFlight, Now: now}
	}
	in := func(p store.InstanceSeenParams) store.Instance {
		return store.Instance{Account: p.Account, InstanceID: p.InstanceID, Hostname: p.Hostname,
			Version: p.Version, LastPollAt: p.Now, InFlight: p.InFlight}
	}
	batch := func(ps ...store.InstanceSeenParams) {
		f.t.Helper()
		if err := f.s.InstancesSeen(f.ctx, ps); err != nil {
			f.t.Fatalf("InstancesSeen(%d polls): %v", len(ps), err)
		}
	}

	// One record written one by one, then a batch that inserts new
	// instances of two accounts and updates the existing one.
	old := p("acme", "b-host", "v1", 0, at(time.Second))
	f.seen(old)
	b := p("acme", "b-host", "v2", 2, at(time.Minute+time.Microsecond))
	a := p("acme", "a-host", "v1", 1, at(30*time.Second))
	g := p("globex", "a-host", "v1", 0, at(40*time.Second))
	batch(b, g, a)
	f.wantInstances("acme", []store.Instance{in(a), in(b)})
	f.wantInstances("globex", []store.Instance{in(g)})

	// A late batch holding older polls changes nothing of what is newer,
	// and still writes what is newer in the same batch.
	a2 := p("acme", "a-host", "v1", 5, at(45*time.Second))
	batch(p("acme", "b-host", "v1", 9, at(50*time.Second)), a2)
	f.wantInstances("acme", []store.Instance{in(a2), in(b)})

	// A poll at the very same time as the stored one is written (the same
	// poll written twice is harmless).
	b2 := b
	b2.InFlight = 3
	batch(b2)
	f.wantInstances("acme", []store.Instance{in(a2), in(b2)})

	// A large batch: every record lands.
	var many []store.InstanceSeenParams
	var want []store.Instance
	for i := range 300 {
		q := p("globex", fmt.Sprintf("host-%03d", i), "v3", i%7, at(time.Hour+time.Duration(i)*time.Millisecond))
		many = append(many, q)
		want = append(want, in(q))
	}
	batch(many...)
	f.wantInstances("globex", append([]store.Instance{in(g)}, want...))
}

// testInstancePurge: the instances whose latest poll is older than the
// cutoff are deleted, of every account; the others stay; one that polls
// again is recorded again.
func testInstancePurge(f *fixture) {
	f.account("acme")
	f.account("globex")
	seen := func(account, id string, now time.Time) store.Instance {
		f.seen(store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id, Version: "v1", Now: now})
		return store.Instance{Account: account, InstanceID: id, Hostname: id, Version: "v1", LastPollAt: now}
	}
	seen("acme", "gone-1", at(0))
	kept := seen("acme", "kept", at(time.Hour))
	seen("globex", "gone-2", at(time.Minute))
	n, err := f.s.InstancePurge(f.ctx, store.InstancePurgeParams{PolledBefore: at(time.Hour)})
	if err != nil {
		f.t.Fatalf("InstancePurge: %v", err)
	}
	if n != 2 {
		f.t.Errorf("InstancePurge deleted %d, want 2", n)
	}
	f.wantInstances("acme", []store.Instance{kept})
	f.wantInstances("globex", nil)
	back := seen("globex", "gone-2", at(2*time.Hour))
	f.wantInstances("globex", []store.Instance{back})
}
