package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var listCases = []testCase{
	{"WorkListIsNewestFirstAndFilters", testWorkListFilters},
	{"WorkListPagesWithoutGapsOrRepeats", testWorkListPages},
	{"WorkListByEndedStateIsNewestFirstAndPages", testWorkListByEndedState},
	{"WorkListPagesThroughTiesByEveryFilter", testWorkListPagesThroughTies},
	{"WorkListRefusesANonPositiveLimit", testWorkListLimit},
	{"AccountStatsCountsQueueClaimsAndInstances", testAccountStats},
	{"AccountStatsOfOneAccountIsItsRowAlone", testAccountStatsOfOneAccount},
	{"PingAnswersOnAMigratedStore", testPing},
}

func (f *fixture) list(p store.WorkListParams) []store.Work {
	f.t.Helper()
	ws, err := f.s.WorkList(f.ctx, p)
	if err != nil {
		f.t.Fatalf("WorkList(%+v): %v", p, err)
	}
	return ws
}

func (f *fixture) wantList(p store.WorkListParams, want ...string) {
	f.t.Helper()
	if got := ids(f.list(p)); !slices.Equal(got, want) {
		f.t.Errorf("WorkList(account %q, state %q, limit %d, before %v/%q) = %v, want %v",
			p.Account, p.State, p.Limit, p.BeforeQueuedAt, p.BeforeID, got, want)
	}
}

// testWorkListFilters lists units of two accounts in every state, whole and
// by account, state and both.
func testWorkListFilters(f *fixture) {
	f.account("acme")
	f.account("globex")
	deadline := at(time.Hour)
	f.enqueue("a-done", "acme", at(1*time.Second), deadline)
	done := f.complete(f.claimOne("acme", "host-a", "a-done", at(2*time.Second)), at(3*time.Second))
	f.enqueue("g-claimed", "globex", at(4*time.Second), deadline)
	f.claimOne("globex", "host-g", "g-claimed", at(5*time.Second))
	f.enqueue("a-queued-1", "acme", at(6*time.Second), deadline)
	f.enqueue("g-queued", "globex", at(7*time.Second), deadline)
	f.enqueue("a-queued-2", "acme", at(8*time.Second+time.Microsecond), deadline)

	all := store.WorkListParams{Limit: 100}
	f.wantList(all, "a-queued-2", "g-queued", "a-queued-1", "g-claimed", "a-done")
	f.wantList(store.WorkListParams{Limit: 100, Account: "acme"}, "a-queued-2", "a-queued-1", "a-done")
	f.wantList(store.WorkListParams{Limit: 100, State: store.StateQueued}, "a-queued-2", "g-queued", "a-queued-1")
	f.wantList(store.WorkListParams{Limit: 100, Account: "globex", State: store.StateClaimed}, "g-claimed")
	f.wantList(store.WorkListParams{Limit: 100, Account: "globex", State: store.StateSucceeded})
	f.wantList(store.WorkListParams{Limit: 100, Account: "nobody"})
	f.wantList(store.WorkListParams{Limit: 2}, "a-queued-2", "g-queued")

	// Listed units are whole: times, claimer, result.
	for _, w := range f.list(store.WorkListParams{Limit: 1, State: store.StateSucceeded}) {
		f.wantWork("WorkList of a finished unit", w, done)
	}

	// Without their sealed blobs: the same units, the same but for them.
	bare := all
	bare.WithoutSealed = true
	f.wantList(bare, "a-queued-2", "g-queued", "a-queued-1", "g-claimed", "a-done")
	for _, w := range f.list(store.WorkListParams{Limit: 1, State: store.StateSucceeded, WithoutSealed: true}) {
		if w.SealedCommand != nil || w.SealedResult != nil {
			f.t.Errorf("WorkList without sealed blobs gave a command of %d bytes and a result of %d", len(w.SealedCommand), len(w.SealedResult))
		}
		want := done
		want.SealedCommand, want.SealedResult = nil, nil
		f.wantWork("WorkList without sealed blobs of a finished unit", w, want)
	}
}

// testWorkListPages walks a listing page by page, from each page's last
// unit, over units that share a queue time (ordered by id then).
func testWorkListPages(f *fixture) {
	f.account("acme")
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("w-%d", i)
		// Pairs share a queue time: w-0 and w-1, w-2 and w-3, ...
		f.enqueue(id, "acme", at(time.Duration(i/2)*time.Second), at(time.Hour))
		want = append([]string{id}, want...)
	}
	var got []string
	p := store.WorkListParams{Account: "acme", Limit: 3}
	for page := 0; ; page++ {
		if page > 5 {
			f.t.Fatalf("WorkList did not end after %d pages; so far %v", page, got)
		}
		ws := f.list(p)
		if len(ws) == 0 {
			break
		}
		got = append(got, ids(ws)...)
		last := ws[len(ws)-1]
		p.BeforeQueuedAt, p.BeforeID = last.QueuedAt, last.ID
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("pages of 3 listed %v, want %v", got, want)
	}
}

// testWorkListByEndedState lists the units of two accounts that ended in
// each state, of every account and of one, whole and page by page: newest
// first, by id among those queued at the same time, none missing nor
// repeated. (The rarer ended states are read from an index of their own.)
func testWorkListByEndedState(f *fixture) {
	f.account("acme")
	f.account("globex")
	for _, u := range []struct {
		id, account string
		state       store.State
		queued      time.Duration
	}{
		{"a-failed-1", "acme", store.StateFailed, 1 * time.Second},
		{"g-failed-1", "globex", store.StateFailed, 1 * time.Second},
		{"a-ok-1", "acme", store.StateSucceeded, 2 * time.Second},
		{"a-cancelled-1", "acme", store.StateCancelled, 3 * time.Second},
		{"a-timed-out-1", "acme", store.StateTimedOut, 3 * time.Second},
		{"a-failed-3", "acme", store.StateFailed, 4 * time.Second},
		{"a-failed-2", "acme", store.StateFailed, 4 * time.Second},
		{"g-cancelled-1", "globex", store.StateCancelled, 5 * time.Second},
		{"g-timed-out-1", "globex", store.StateTimedOut, 6 * time.Second},
		{"a-cancelled-2", "acme", store.StateCancelled, 7 * time.Second},
		{"a-failed-4", "acme", store.StateFailed, 8 * time.Second},
		{"g-ok-1", "globex", store.StateSucceeded, 9 * time.Second},
		{"a-queued", "acme", store.StateQueued, 10 * time.Second},
	} {
		queued, host := at(u.queued), "host-"+u.id
		deadline := at(time.Hour)
		if u.state == store.StateTimedOut {
			deadline = queued.Add(time.Millisecond)
		}
		w := f.enqueue(u.id, u.account, queued, deadline)
		switch u.state {
		case store.StateSucceeded:
			f.complete(f.claimOne(u.account, host, u.id, queued), queued)
		case store.StateFailed:
			c := f.claimOne(u.account, host, u.id, queued)
			if _, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{ID: c.ID, ClaimID: c.ClaimID, State: store.StateFailed, SealedResult: []byte("r"), Now: queued}); err != nil {
				f.t.Fatalf("WorkComplete(%s, failed): %v", u.id, err)
			}
		case store.StateCancelled:
			f.cancel(w.ID, queued)
		case store.StateTimedOut:
			f.claimOne(u.account, host, u.id, queued) // expired below
		}
	}
	if ex, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(time.Minute)}); err != nil || len(ex) != 2 {
		f.t.Fatalf("WorkExpire = %v, %v; want the 2 units to time out", ids(ex), err)
	}

	for _, c := range []struct {
		account string
		state   store.State
		want    []string
	}{
		{"", store.StateFailed, []string{"a-failed-4", "a-failed-3", "a-failed-2", "g-failed-1", "a-failed-1"}},
		{"acme", store.StateFailed, []string{"a-failed-4", "a-failed-3", "a-failed-2", "a-failed-1"}},
		{"globex", store.StateFailed, []string{"g-failed-1"}},
		{"", store.StateCancelled, []string{"a-cancelled-2", "g-cancelled-1", "a-cancelled-1"}},
		{"acme", store.StateCancelled, []string{"a-cancelled-2", "a-cancelled-1"}},
		{"", store.StateTimedOut, []string{"g-timed-out-1", "a-timed-out-1"}},
		{"globex", store.StateTimedOut, []string{"g-timed-out-1"}},
		{"", store.StateSucceeded, []string{"g-ok-1", "a-ok-1"}},
		{"acme", store.StateSucceeded, []string{"a-ok-1"}},
		{"nobody", store.StateFailed, nil},
	} {
		p := store.WorkListParams{Account: c.account, State: c.state, Limit: 100}
		f.wantList(p, c.want...)
		p.WithoutSealed = true
		f.wantList(p, c.want...)
		// Two at a time, each page from the last unit of the one before.
		var got []string
		p.Limit = 2
		for page := 0; page <= len(c.want)/2; page++ {
			ws := f.list(p)
			got = append(got, ids(ws)...)
			if len(ws) < p.Limit {
				break
			}
			last := ws[len(ws)-1]
			p.BeforeQueuedAt, p.BeforeID = last.QueuedAt, last.ID
		}
		if !slices.Equal(got, c.want) {
			f.t.Errorf("WorkList(account %q, state %s) in pages of 2 = %v, want %v", c.account, c.state, got, c.want)
		}
	}
}

// testWorkListPagesThroughTies walks the listing by every filter (none,
// account, state, both; every state) page by page, in pages of 1, 2 and 5,
// over units most of which share a queue time with units of every account
// and state: each unit of the filter exactly once, newest first and by id
// (descending) among those queued at the same time, whichever unit a page
// ends on. The cursor (BeforeQueuedAt, BeforeID) reads each index of the
// listing from the middle of a run of equal queue times.
func testWorkListPagesThroughTies(f *fixture) {
	accounts := []string{"acme", "globex"}
	states := []store.State{store.StateQueued, store.StateClaimed, store.StateSucceeded, store.StateFailed, store.StateTimedOut, store.StateCancelled}
	for _, a := range accounts {
		f.account(a)
	}
	type unit struct {
		id, account string
		state       store.State
		queued      time.Duration
	}
	// 36 units: u-00 to u-23 all queued at 0 s (each account and state
	// twice), u-24 to u-35 at 1 s (each once).
	var units []unit
	for i := range 36 {
		units = append(units, unit{
			id:      fmt.Sprintf("u-%02d", i),
			account: accounts[i/len(states)%len(accounts)],
			state:   states[i%len(states)],
			queued:  time.Duration(i/24) * time.Second,
		})
	}
	// The ended and claimed units first, one at a time (a claim takes the
	// account's oldest queued unit), then the queued ones.
	timedOut := 0
	for _, u := range units {
		queued, host := at(u.queued), "host-"+u.id
		switch u.state {
		case store.StateQueued:
			continue
		case store.StateClaimed:
			f.enqueue(u.id, u.account, queued, at(time.Hour))
			f.claimOne(u.account, host, u.id, queued)
		case store.StateSucceeded:
			f.enqueue(u.id, u.account, queued, at(time.Hour))
			f.complete(f.claimOne(u.account, host, u.id, queued), queued)
		case store.StateFailed:
			f.enqueue(u.id, u.account, queued, at(time.Hour))
			c := f.claimOne(u.account, host, u.id, queued)
			if _, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{ID: c.ID, ClaimID: c.ClaimID, State: store.StateFailed, SealedResult: []byte("r"), Now: queued}); err != nil {
				f.t.Fatalf("WorkComplete(%s, failed): %v", u.id, err)
			}
		case store.StateCancelled:
			f.enqueue(u.id, u.account, queued, at(time.Hour))
			f.cancel(u.id, queued)
		case store.StateTimedOut:
			f.enqueue(u.id, u.account, queued, queued.Add(time.Millisecond))
			f.claimOne(u.account, host, u.id, queued) // expired below
			timedOut++
		}
	}
	if ex, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(time.Minute)}); err != nil || len(ex) != timedOut {
		f.t.Fatalf("WorkExpire = %v, %v; want the %d units to time out", ids(ex), err, timedOut)
	}
	for _, u := range units {
		if u.state == store.StateQueued {
			f.enqueue(u.id, u.account, at(u.queued), at(time.Hour))
		}
	}

	for _, account := range append([]string{""}, accounts...) {
		for _, state := range append([]store.State{""}, states...) {
			// The units of the filter, newest first, by id among ties.
			var want []string
			for i := len(units) - 1; i >= 0; i-- {
				u := units[i]
				if (account == "" || u.account == account) && (state == "" || u.state == state) {
					want = append(want, u.id)
				}
			}
			for _, limit := range []int{1, 2, 5} {
				p := store.WorkListParams{Account: account, State: state, Limit: limit, WithoutSealed: true}
				var got []string
				for page := 0; ; page++ {
					if page > len(want) {
						f.t.Fatalf("WorkList(account %q, state %q) in pages of %d did not end after %d pages; so far %v", account, state, limit, page, got)
					}
					ws := f.list(p)
					if len(ws) > limit {
						f.t.Errorf("WorkList(account %q, state %q, limit %d) gave %d units", account, state, limit, len(ws))
					}
					if len(ws) == 0 {
						break
					}
					got = append(got, ids(ws)...)
					last := ws[len(ws)-1]
					p.BeforeQueuedAt, p.BeforeID = last.QueuedAt, last.ID
				}
				if !slices.Equal(got, want) {
					f.t.Errorf("WorkList(account %q, state %q) in pages of %d = %v, want %v", account, state, limit, got, want)
				}
			}
		}
	}
}

func testWorkListLimit(f *fixture) {
	for _, limit := range []int{0, -1} {
		if _, err := f.s.WorkList(f.ctx, store.WorkListParams{Limit: limit}); err == nil {
			f.t.Errorf("WorkList with limit %d: no error, want one", limit)
		}
	}
}

func testAccountStats(f *fixture) {
	for _, name := range []string{"initech", "acme", "globex"} {
		f.account(name)
	}
	deadline := at(time.Hour)
	// acme: two queued (the oldest at 3 s), one claimed, one finished.
	f.enqueue("a-1", "acme", at(1*time.Second), deadline)
	f.complete(f.claimOne("acme", "host-a", "a-1", at(1500*time.Millisecond)), at(1600*time.Millisecond))
	f.enqueue("a-2", "acme", at(2*time.Second+3*time.Microsecond), deadline)
	f.claimOne("acme", "host-a", "a-2", at(2500*time.Millisecond))
	f.enqueue("a-3", "acme", at(3*time.Second+7*time.Microsecond), deadline)
	f.enqueue("a-4", "acme", at(4*time.Second), deadline)
	// globex: one queued and an instance that stopped polling long ago
	// (stranded work).
	f.enqueue("g-1", "globex", at(5*time.Second), deadline)

	onlineSince := at(time.Minute)
	poll := func(account, id string, when time.Time) {
		f.seen(store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id + ".example", Version: "v1", Now: when})
	}
	poll("acme", "host-a", at(2*time.Minute))
	poll("acme", "host-b", onlineSince) // exactly at the bound: online
	poll("acme", "host-c", at(30*time.Second))
	poll("globex", "host-g", at(10*time.Second))
	// Polls refused for want of a usable key: counted refused when the
	// latest poll is at or after the bound and not a stop, never online.
	refused := func(account, id string, when time.Time, stopping bool) {
		f.seen(store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id + ".example", Version: "v1",
			RefusedKeyIDs: []uint32{1}, Stopping: stopping, Now: when})
	}
	refused("acme", "host-d", onlineSince, false)         // exactly at the bound: refused
	refused("acme", "host-e", at(30*time.Second), false)  // before the bound: neither
	refused("acme", "host-f", at(90*time.Second), true)   // stopped: neither
	refused("globex", "host-h", at(3*time.Minute), false) // globex's only live instance
	poll("initech", "host-i", at(20*time.Second))         // accepted, then refused later
	refused("initech", "host-i", at(100*time.Second), false)

	got, err := f.s.AccountStats(f.ctx, store.AccountStatsParams{OnlineSince: onlineSince})
	if err != nil {
		f.t.Fatalf("AccountStats: %v", err)
	}
	want := []store.AccountStats{
		{Account: "acme", Queued: 2, OldestQueuedAt: at(3*time.Second + 7*time.Microsecond), Claimed: 1,
			Instances: 6, InstancesOnline: 2, InstancesRefused: 1, LastPollAt: at(2 * time.Minute)},
		{Account: "globex", Queued: 1, OldestQueuedAt: at(5 * time.Second),
			Instances: 2, InstancesOnline: 0, InstancesRefused: 1, LastPollAt: at(3 * time.Minute)},
		{Account: "initech", Instances: 1, InstancesRefused: 1, LastPollAt: at(100 * time.Second)},
	}
	if len(got) != len(want) {
		f.t.Fatalf("AccountStats = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Account != w.Account || g.Queued != w.Queued || !g.OldestQueuedAt.Equal(w.OldestQueuedAt) ||
			g.Claimed != w.Claimed || g.Instances != w.Instances || g.InstancesOnline != w.InstancesOnline ||
			g.InstancesRefused != w.InstancesRefused || !g.LastPollAt.Equal(w.LastPollAt) {
			f.t.Errorf("AccountStats[%d] = %+v, want %+v", i, g, w)
		}
	}
}

// testAccountStatsOfOneAccount: AccountStats of one account (p.Account) is
// that account's row of every account's statistics, and nothing for a name
// that is no account, nor for an account being deleted.
func testAccountStatsOfOneAccount(f *fixture) {
	for _, name := range []string{"initech", "acme", "globex", "umbrella"} {
		f.account(name)
	}
	deadline := at(time.Hour)
	f.enqueue("a-1", "acme", at(1*time.Second), deadline)
	f.enqueue("a-2", "acme", at(2*time.Second), deadline)
	f.claimOne("acme", "host-a", "a-1", at(3*time.Second))
	f.enqueue("g-1", "globex", at(4*time.Second), deadline)
	f.enqueue("u-1", "umbrella", at(5*time.Second), deadline)
	f.seen(store.InstanceSeenParams{Account: "acme", InstanceID: "host-a", Hostname: "host-a.example", Version: "v1", Now: at(time.Minute)})
	f.seen(store.InstanceSeenParams{Account: "initech", InstanceID: "host-i", Hostname: "host-i.example", Version: "v1",
		RefusedKeyIDs: []uint32{1}, Now: at(time.Minute)})
	if _, err := f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: "umbrella", Reason: "deleted", Now: at(2 * time.Minute)}); err != nil {
		f.t.Fatalf("AccountDelete(umbrella): %v", err)
	}
	onlineSince := at(30 * time.Second)
	all, err := f.s.AccountStats(f.ctx, store.AccountStatsParams{OnlineSince: onlineSince})
	if err != nil {
		f.t.Fatalf("AccountStats: %v", err)
	}
	if len(all) != 3 {
		f.t.Fatalf("AccountStats = %+v, want acme, globex and initech", all)
	}
	for _, want := range all {
		got, err := f.s.AccountStats(f.ctx, store.AccountStatsParams{OnlineSince: onlineSince, Account: want.Account})
		if err != nil {
			f.t.Fatalf("AccountStats of %s: %v", want.Account, err)
		}
		if len(got) != 1 || got[0].Account != want.Account || got[0].Queued != want.Queued ||
			!got[0].OldestQueuedAt.Equal(want.OldestQueuedAt) || got[0].Claimed != want.Claimed ||
			got[0].Instances != want.Instances || got[0].InstancesOnline != want.InstancesOnline ||
			got[0].InstancesRefused != want.InstancesRefused || !got[0].LastPollAt.Equal(want.LastPollAt) {
			f.t.Errorf("AccountStats of %s = %+v, want its row of every account's, %+v", want.Account, got, want)
		}
	}
	for _, name := range []string{"nobody", "umbrella", store.DeletedAccountName("umbrella", at(2*time.Minute)), "\xff", "a\x00b"} {
		if got, err := f.s.AccountStats(f.ctx, store.AccountStatsParams{OnlineSince: onlineSince, Account: name}); err != nil || len(got) != 0 {
			f.t.Errorf("AccountStats of %q = %+v, %v; want none", name, got, err)
		}
	}
}

func testPing(f *fixture) {
	if err := f.s.Ping(f.ctx); err != nil {
		f.t.Errorf("Ping on a freshly opened store: %v", err)
	}
}
