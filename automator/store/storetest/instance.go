package storetest

import (
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var instanceCases = []testCase{
	{"InstanceSeenUpsertsAndInstanceListIsOrderedByID", testInstanceSeenAndList},
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
