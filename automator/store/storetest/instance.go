package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var instanceCases = []testCase{
	{"InstanceSeenUpsertsAndInstanceListIsOrderedByID", testInstanceSeenAndList},
	{"InstancesSeenUpdatesABatchOfRecordedInstancesAndNeverMovesARecordBack", testInstancesSeenBatch},
	{"InstancePurgeForgetsInstancesThatStoppedPolling", testInstancePurge},
	{"ANewInstanceAtTheAccountsBoundTakesThePlaceOfOneOffline", testInstanceCap},
	{"NewInstancesPollingAtOnceDoNotPassTheAccountsBound", testInstanceCapConcurrent},
	{"RecordedInstancesPollingAsNewOnesTakeTheirPlacesDoNotPassTheAccountsBound", testInstanceCapEvictedAtOnce},
	{"InstanceListCountsInFlightTheUnitsEachInstanceHoldsClaimed", testInstanceInFlight},
	{"AStoppingPollShowsTheInstanceStoppedUntilItPollsAgain", testInstanceStopped},
	{"APollOfARunNumberedBeforeItsStopNeverEndsIt", testInstanceStopOrderedByPollSeq},
	{"ABatchedPollOfTheStoredRunNumberedAfterItIsWrittenThoughEarlierOnTheClock", testInstanceBatchAfterClockStepBack},
	{"ARefusedPollShowsTheInstanceRefusedWithItsKeyIDsUntilAPollIsAccepted", testInstanceRefused},
	{"APollRefusedForAnExpiredTokenShowsTheInstanceRefusedForItUntilAPollIsAccepted", testInstanceRefusedTokenExpired},
	{"APollRefusedForAWrongKeyShowsTheInstanceRefusedForItUntilAPollIsAccepted", testInstanceRefusedWrongKey},
}

func (f *fixture) seen(p store.InstanceSeenParams) {
	f.t.Helper()
	if err := f.s.InstanceSeen(f.ctx, p); err != nil {
		f.t.Fatalf("InstanceSeen(%q, %q): %v", p.Account, p.InstanceID, err)
	}
}

// seenBatch records polls ps in one batch (InstancesSeen), of instances
// recorded.
func (f *fixture) seenBatch(ps ...store.InstanceSeenParams) {
	f.t.Helper()
	if unrecorded := f.seenBatchUnrecorded(ps...); len(unrecorded) != 0 {
		f.t.Fatalf("InstancesSeen(%d polls) returned %d polls as of instances not recorded: %+v", len(ps), len(unrecorded), unrecorded)
	}
}

// seenBatchUnrecorded records polls ps in one batch (InstancesSeen) and
// returns those of instances not recorded.
func (f *fixture) seenBatchUnrecorded(ps ...store.InstanceSeenParams) []store.InstanceSeenParams {
	f.t.Helper()
	unrecorded, err := f.s.InstancesSeen(f.ctx, ps)
	if err != nil {
		f.t.Fatalf("InstancesSeen(%d polls): %v", len(ps), err)
	}
	return unrecorded
}

// listedAs is the instance a listing shows after poll p was recorded.
func listedAs(p store.InstanceSeenParams) store.Instance {
	return store.Instance{Account: p.Account, InstanceID: p.InstanceID, Hostname: p.Hostname, Version: p.Version,
		LastPollAt: p.Now, Stopped: p.Stopping, RefusedKeyIDs: p.RefusedKeyIDs, RefusedTokenExpired: p.TokenExpired,
		RefusedWrongKey: p.WrongKey}
}

// runPoll is poll number seq of run (a proxy process) of instance a of
// acme, at now.
func runPoll(run string, seq int64, stopping bool, now time.Time) store.InstanceSeenParams {
	return store.InstanceSeenParams{Account: "acme", InstanceID: "a", Hostname: "a.example", Version: "v1",
		Stopping: stopping, Run: run, PollSeq: seq, Now: now}
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
			g.Version != w.Version || !g.LastPollAt.Equal(w.LastPollAt) || g.Stopped != w.Stopped || g.InFlight != w.InFlight ||
			!slices.Equal(g.RefusedKeyIDs, w.RefusedKeyIDs) || g.RefusedTokenExpired != w.RefusedTokenExpired ||
			g.RefusedWrongKey != w.RefusedWrongKey || g.RefusedCause() != w.RefusedCause() {
			f.t.Errorf("InstanceList(%q)[%d] = %+v, want %+v", account, i, g, w)
		}
	}
}

func testInstanceSeenAndList(f *fixture) {
	f.account("acme")
	f.account("globex")
	f.wantInstances("acme", nil)

	// What an instance says it runs is not its in-flight count: none of
	// these has claimed a unit.
	seen := func(account, id, version string, running int, now time.Time) store.Instance {
		p := store.InstanceSeenParams{
			Account:    account,
			InstanceID: id,
			Hostname:   fmt.Sprintf("%s.%s.example", id, account),
			Version:    version,
			Running:    running,
			Now:        now,
		}
		f.seen(p)
		return store.Instance{Account: account, InstanceID: id, Hostname: p.Hostname, Version: version, LastPollAt: now}
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
	if unrecorded, err := f.s.InstancesSeen(f.ctx, nil); err != nil || len(unrecorded) != 0 {
		f.t.Fatalf("InstancesSeen(nil): %v, %v", unrecorded, err)
	}
	f.wantInstances("acme", nil)

	p := func(account, id, version string, running int, now time.Time) store.InstanceSeenParams {
		return store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id + ".example",
			Version: version, Running: running, Now: now}
	}

	// Records written one by one, then a batch that updates those of two
	// accounts.
	f.seen(p("acme", "b-host", "v1", 0, at(time.Second)))
	f.seen(p("acme", "a-host", "v0", 0, at(time.Second)))
	f.seen(p("globex", "a-host", "v0", 0, at(time.Second)))
	b := p("acme", "b-host", "v2", 2, at(time.Minute+time.Microsecond))
	a := p("acme", "a-host", "v1", 1, at(30*time.Second))
	g := p("globex", "a-host", "v1", 0, at(40*time.Second))
	f.seenBatch(b, g, a)
	f.wantInstances("acme", []store.Instance{listedAs(a), listedAs(b)})
	f.wantInstances("globex", []store.Instance{listedAs(g)})

	// A poll of an instance with no record (made room for at the
	// account's bound by another's poll, perhaps on another replica, or
	// deleted) is not written but returned, for InstanceSeen to write
	// checking the bound; the rest of its batch is written.
	c := p("acme", "c-host", "v1", 0, at(50*time.Second))
	b1 := b
	b1.Running, b1.Now = 4, at(time.Minute+2*time.Microsecond)
	if unrecorded := f.seenBatchUnrecorded(c, b1); len(unrecorded) != 1 || unrecorded[0].InstanceID != "c-host" || unrecorded[0].Account != "acme" {
		f.t.Errorf("InstancesSeen of a poll of an instance not recorded and one recorded returned %+v; want the first", unrecorded)
	}
	f.wantInstances("acme", []store.Instance{listedAs(a), listedAs(b1)})
	b = b1

	// A late batch holding older polls changes nothing of what is newer,
	// and still writes what is newer in the same batch.
	a2 := p("acme", "a-host", "v1", 5, at(45*time.Second))
	f.seenBatch(p("acme", "b-host", "v1", 9, at(50*time.Second)), a2)
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b)})

	// A poll at the very same time as the stored one is written (the same
	// poll written twice is harmless).
	b2 := b
	b2.Running = 3
	f.seenBatch(b2)
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b2)})

	// A large batch: every record lands.
	var many []store.InstanceSeenParams
	var want []store.Instance
	for i := range 300 {
		id := fmt.Sprintf("host-%03d", i)
		f.seen(p("globex", id, "v2", 0, at(time.Minute)))
		q := p("globex", id, "v3", i%7, at(time.Hour+time.Duration(i)*time.Millisecond))
		many = append(many, q)
		want = append(want, listedAs(q))
	}
	f.seenBatch(many...)
	f.wantInstances("globex", append([]store.Instance{listedAs(g)}, want...))
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

// testInstanceInFlight: an instance's in-flight count is the number of its
// account's units it holds claimed, counted from the units, whatever it said
// when it last polled: an instance that claimed units and died shows them
// until they end (by result, cancel or deadline), then 0; an idle one shows
// 0; the same instance id in another account, and units of other
// instances, count apart.
func testInstanceInFlight(f *fixture) {
	f.account("acme")
	f.account("globex")
	seen := func(account, id string, running int, now time.Time) store.Instance {
		f.seen(store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: id, Version: "v1", Running: running, Now: now})
		return store.Instance{Account: account, InstanceID: id, Hostname: id, Version: "v1", LastPollAt: now}
	}
	deadline := at(10 * time.Minute)
	for i := range 6 {
		f.enqueue(fmt.Sprintf("w-%d", i), "acme", at(time.Duration(i)*time.Millisecond), deadline)
	}
	f.enqueue("w-late", "acme", at(time.Second), at(time.Minute))
	f.enqueue("g-1", "globex", at(0), deadline)

	// a polls (running nothing) and claims four units, polls again saying
	// it runs 5 and claims two more. b polls saying it runs 2, then claims
	// the last unit. idle says it runs 1 and claims nothing. a of globex
	// claims a unit of its own account.
	seen("acme", "a", 0, at(2*time.Second))
	got := f.claim("acme", "a", 4, at(2*time.Second))
	a := seen("acme", "a", 5, at(3*time.Second))
	more := f.claim("acme", "a", 2, at(3*time.Second))
	b := seen("acme", "b", 2, at(3*time.Second))
	late := f.claim("acme", "b", 1, at(3*time.Second))
	idle := seen("acme", "idle", 1, at(4*time.Second))
	gb := seen("globex", "a", 0, at(3*time.Second))
	f.claim("globex", "a", 1, at(3*time.Second))
	if len(got) != 4 || len(more) != 2 || len(late) != 1 || late[0].ID != "w-late" {
		f.t.Fatalf("a claimed %v then %v, b %v; want 4 units, 2 and w-late", ids(got), ids(more), ids(late))
	}
	inFlight := func(in store.Instance, n int) store.Instance { in.InFlight = n; return in }
	f.wantInstances("acme", []store.Instance{inFlight(a, 6), inFlight(b, 1), idle})
	f.wantInstances("globex", []store.Instance{inFlight(gb, 1)})

	// a dies: it never polls again. Its units end one by one, by a result,
	// a cancel, the deadline; each ends its count.
	f.complete(got[0], at(5*time.Second))
	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: got[1].ID, Reason: "cancelled by the caller", Now: at(5 * time.Second)}); err != nil {
		f.t.Fatalf("WorkCancel(%s): %v", got[1].ID, err)
	}
	f.wantInstances("acme", []store.Instance{inFlight(a, 4), inFlight(b, 1), idle})
	// b's unit is the one with the early deadline.
	if ended, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(time.Minute)}); err != nil || len(ended) != 1 || ended[0].InstanceID != "b" {
		f.t.Fatalf("WorkExpire at a minute = %v, %v; want b's unit", ids(ended), err)
	}
	f.wantInstances("acme", []store.Instance{inFlight(a, 4), b, idle})
	if ended, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: deadline}); err != nil || len(ended) != 5 {
		f.t.Fatalf("WorkExpire at the deadline = %v, %v; want a's 4 units and globex's", ids(ended), err)
	}
	f.wantInstances("acme", []store.Instance{a, b, idle})
	f.wantInstances("globex", []store.Instance{gb})
}

// testInstanceStopped: a poll that says the instance is stopping (a
// graceful stop) records it stopped, written one by one or in a batch: it
// is listed so and not counted online, however recent that poll, until a
// poll without it. A late batch holding an older poll does not undo it.
func testInstanceStopped(f *fixture) {
	f.account("acme")
	poll := func(id string, stopping bool, now time.Time) store.InstanceSeenParams {
		return store.InstanceSeenParams{Account: "acme", InstanceID: id, Hostname: id + ".example", Version: "v1", Stopping: stopping, Now: now}
	}
	online := func(want int) { f.t.Helper(); f.wantOnlineOfTwo(want, 0) }

	a1, b1 := poll("a", false, at(time.Second)), poll("b", false, at(time.Second))
	f.seen(a1)
	f.seen(b1)
	f.wantInstances("acme", []store.Instance{listedAs(a1), listedAs(b1)})
	online(2)

	// a stops: its last poll, a moment later, says so.
	a2 := poll("a", true, at(2*time.Second))
	f.seen(a2)
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b1)})
	online(1)
	// A batch written late, holding a's poll from before the stop, does
	// not bring it back.
	f.seenBatch(poll("a", false, at(1500*time.Millisecond)))
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b1)})
	online(1)
	// Its further polls while its running units finish say it too.
	a3 := poll("a", true, at(3*time.Second))
	f.seenBatch(a3)
	f.wantInstances("acme", []store.Instance{listedAs(a3), listedAs(b1)})

	// b stops too, recorded in a batch: none is online.
	b2 := poll("b", true, at(3*time.Second))
	f.seenBatch(b2)
	f.wantInstances("acme", []store.Instance{listedAs(a3), listedAs(b2)})
	online(0)

	// Each is started again: its first poll, written either way, shows it
	// online at once.
	a4 := poll("a", false, at(time.Minute))
	f.seen(a4)
	b3 := poll("b", false, at(time.Minute))
	f.seenBatch(b3)
	f.wantInstances("acme", []store.Instance{listedAs(a4), listedAs(b3)})
	online(2)
}

// testInstanceStopOrderedByPollSeq: polls of one proxy process (run) are
// ordered by their numbers, not by when they are written: a poll of the
// run numbered before its stopping poll, written after it (it was on its
// way when the process polled again to say it stops), one at a time or in
// a batch, and later on the automator's clock, never ends the stop. A poll
// of another run (the process started again) ends it at once, whatever its
// number.
func testInstanceStopOrderedByPollSeq(f *fixture) {
	f.account("acme")
	f.seen(runPoll("r1", 1, false, at(time.Second)))
	stop := runPoll("r1", 3, true, at(2*time.Second))
	f.seen(stop)
	f.wantInstances("acme", []store.Instance{listedAs(stop)})

	// Poll 2, later on the clock (its handler read it last), written
	// after the stop: one at a time, then in a batch.
	late := runPoll("r1", 2, false, at(3*time.Second))
	f.seen(late)
	f.wantInstances("acme", []store.Instance{listedAs(stop)})
	f.seenBatch(late)
	f.wantInstances("acme", []store.Instance{listedAs(stop)})
	// The run's further polls while it stops are recorded.
	stop4 := runPoll("r1", 4, true, at(4*time.Second))
	f.seen(stop4)
	f.wantInstances("acme", []store.Instance{listedAs(stop4)})

	// Started again: the new run's first poll ends the stop, one at a time
	// or in a batch.
	again := runPoll("r2", 1, false, at(5*time.Second))
	f.seen(again)
	f.wantInstances("acme", []store.Instance{listedAs(again)})
	stop2 := runPoll("r2", 2, true, at(6*time.Second))
	f.seen(stop2)
	f.wantInstances("acme", []store.Instance{listedAs(stop2)})
	again2 := runPoll("r3", 1, false, at(7*time.Second))
	f.seenBatch(again2)
	f.wantInstances("acme", []store.Instance{listedAs(again2)})
}

// testInstanceBatchAfterClockStepBack: the automator's clock stepped back
// (an NTP step) between two polls of one proxy process: the later poll,
// numbered after the stored one but earlier on the clock, is written in a
// batch as one at a time, so the record follows the clock. Were it left
// out as older, the record would keep the time from before the step,
// ahead of the clock, until the clock passed it again, and an instance
// that died meanwhile would be listed online for as long as the step. A
// batch still changes nothing of a newer poll of another run, or of the
// stored run numbered after its own.
func testInstanceBatchAfterClockStepBack(f *fixture) {
	f.account("acme")
	before := runPoll("r1", 1, false, at(time.Hour))
	f.seen(before)
	// The clock steps back by an hour; the process polls on.
	after := runPoll("r1", 2, false, at(time.Minute))
	f.seenBatch(after)
	f.wantInstances("acme", []store.Instance{listedAs(after)})
	online := func(since time.Time, want int) {
		f.t.Helper()
		stats, err := f.s.AccountStats(f.ctx, store.AccountStatsParams{OnlineSince: since})
		if err != nil {
			f.t.Fatalf("AccountStats: %v", err)
		}
		if len(stats) != 1 || stats[0].InstancesOnline != want {
			f.t.Errorf("AccountStats since %v = %+v, want %d online", since, stats, want)
		}
	}
	// It dies: two minutes later on the clock it is no longer online.
	online(at(2*time.Minute), 0)

	// A batch holding an older poll of the run, or one of another run
	// earlier on the clock, changes nothing.
	f.seenBatch(runPoll("r1", 1, false, at(2*time.Minute)))
	f.wantInstances("acme", []store.Instance{listedAs(after)})
	f.seenBatch(runPoll("r0", 9, false, at(30*time.Second)))
	f.wantInstances("acme", []store.Instance{listedAs(after)})

	// Its stop, and its further polls while it stops, likewise.
	stop := runPoll("r1", 3, true, at(2*time.Minute))
	f.seen(stop)
	stop4 := runPoll("r1", 4, true, at(90*time.Second))
	f.seenBatch(stop4)
	f.wantInstances("acme", []store.Instance{listedAs(stop4)})
}

// testInstanceRefused: a poll refused because the instance holds no usable
// key of its account (a profile of before a key rotation) records the
// instance as refused, with the key ids it listed, written one by one or
// in a batch: it is listed so and counted refused, not online, however
// recent that poll, until a poll of it is accepted. A late batch holding an older
// accepted poll does not undo it; one that says it stops still records
// the stop.
func testInstanceRefused(f *fixture) {
	f.account("acme")
	poll := func(id string, refused []uint32, now time.Time) store.InstanceSeenParams {
		return store.InstanceSeenParams{Account: "acme", InstanceID: id, Hostname: id + ".example", Version: "v1", RefusedKeyIDs: refused, Now: now}
	}
	online := func(want, refused int) { f.t.Helper(); f.wantOnlineOfTwo(want, refused) }

	a1, b1 := poll("a", nil, at(time.Second)), poll("b", nil, at(time.Second))
	f.seen(a1)
	f.seen(b1)
	f.wantInstances("acme", []store.Instance{listedAs(a1), listedAs(b1)})
	online(2, 0)

	// The account's key is rotated with no overlap: a, still on the old
	// profile, holds key id 1 only, and its polls are refused.
	a2 := poll("a", []uint32{1}, at(2*time.Second))
	f.seen(a2)
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b1)})
	online(1, 1)
	// A batch written late, holding a's poll from before, does not bring
	// it back.
	f.seenBatch(poll("a", nil, at(1500*time.Millisecond)))
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b1)})
	online(1, 1)
	// Its further refused polls, batched, keep it refused with the ids
	// each listed.
	a3 := poll("a", []uint32{1, 4294967295}, at(3*time.Second))
	f.seenBatch(a3)
	f.wantInstances("acme", []store.Instance{listedAs(a3), listedAs(b1)})
	online(1, 1)

	// b is refused too, recorded in a batch: none is online.
	b2 := poll("b", []uint32{1}, at(3*time.Second))
	f.seenBatch(b2)
	f.wantInstances("acme", []store.Instance{listedAs(a3), listedAs(b2)})
	online(0, 2)
	// b stops, its stop refused as its polls are: it is stopped.
	b3 := poll("b", []uint32{1}, at(4*time.Second))
	b3.Stopping = true
	f.seen(b3)
	f.wantInstances("acme", []store.Instance{listedAs(a3), listedAs(b3)})
	online(0, 1)

	// Each gets the latest profile: its first poll accepted, written
	// either way, shows it online at once, and refused no more.
	a4 := poll("a", nil, at(time.Minute))
	f.seen(a4)
	b4 := poll("b", nil, at(time.Minute))
	f.seenBatch(b4)
	f.wantInstances("acme", []store.Instance{listedAs(a4), listedAs(b4)})
	online(2, 0)
}

// testInstanceRefusedTokenExpired: a poll refused because the account
// token it presented expired (the account's before a rotation whose
// overlap ended: a proxy on the whole old profile) records the instance
// as refused for that cause, written one by one or in a batch: it is
// listed so, with no key ids, and not counted online until a poll of it
// is accepted. A later poll refused for want of a usable key says that
// cause instead.
func testInstanceRefusedTokenExpired(f *fixture) {
	f.account("acme")
	poll := func(id string, now time.Time) store.InstanceSeenParams {
		return store.InstanceSeenParams{Account: "acme", InstanceID: id, Hostname: id + ".example", Version: "v1", Now: now}
	}
	expired := func(id string, now time.Time) store.InstanceSeenParams {
		p := poll(id, now)
		p.TokenExpired = true
		return p
	}
	online := func(want, refused int) { f.t.Helper(); f.wantOnlineOfTwo(want, refused) }

	a1, b1 := poll("a", at(time.Second)), poll("b", at(time.Second))
	f.seen(a1)
	f.seen(b1)
	online(2, 0)

	// The overlap of a rotation ends: a, on the old profile, is refused
	// at authentication, written at once; b, in a batch.
	a2, b2 := expired("a", at(2*time.Second)), expired("b", at(2*time.Second))
	f.seen(a2)
	f.seenBatch(b2)
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b2)})
	online(0, 2)
	// A batch written late, holding a's accepted poll from before, does
	// not bring it back.
	f.seenBatch(poll("a", at(1500*time.Millisecond)))
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b2)})
	online(0, 2)

	// b gets the new token but not the new key: refused for that, with
	// its key ids, no more for its token.
	b3 := poll("b", at(3*time.Second))
	b3.RefusedKeyIDs = []uint32{1}
	f.seen(b3)
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b3)})

	// a gets the latest profile: its first poll accepted shows it online
	// at once, refused no more.
	a3 := poll("a", at(time.Minute))
	f.seenBatch(a3)
	f.wantInstances("acme", []store.Instance{listedAs(a3), listedAs(b3)})
	online(1, 1)
}

// wantOnlineOfTwo checks that the fixture's one account has two instances,
// want of them counted online and refused of them counted refused
// (AccountStats, any poll since at(0)).
func (f *fixture) wantOnlineOfTwo(want, refused int) {
	f.t.Helper()
	stats, err := f.s.AccountStats(f.ctx, store.AccountStatsParams{OnlineSince: at(0)})
	if err != nil {
		f.t.Fatalf("AccountStats: %v", err)
	}
	if len(stats) != 1 || stats[0].Instances != 2 || stats[0].InstancesOnline != want || stats[0].InstancesRefused != refused {
		f.t.Errorf("AccountStats = %+v, want 2 instances, %d online, %d refused", stats, want, refused)
	}
}

// testInstanceRefusedWrongKey: a poll refused because a key the instance
// holds is not the account's key of its id (another account's key line,
// or a mistyped one) records the instance as refused for that cause, with
// the key ids it listed, written one by one or in a batch: it is listed
// so, and not counted online, until a poll of it is accepted. A later
// poll refused for want of a usable key says that cause instead.
func testInstanceRefusedWrongKey(f *fixture) {
	f.account("acme")
	poll := func(id string, now time.Time) store.InstanceSeenParams {
		return store.InstanceSeenParams{Account: "acme", InstanceID: id, Hostname: id + ".example", Version: "v1", Now: now}
	}
	wrong := func(id string, now time.Time) store.InstanceSeenParams {
		p := poll(id, now)
		p.WrongKey = true
		p.RefusedKeyIDs = []uint32{1}
		return p
	}
	online := func(want, refused int) { f.t.Helper(); f.wantOnlineOfTwo(want, refused) }

	a1, b1 := wrong("a", at(time.Second)), wrong("b", at(time.Second))
	if a1.RefusedCause() != store.RefusedWrongKey || store.RefusedCauseText(a1) != "wrong_key" {
		f.t.Fatalf("a poll refused for a wrong key has cause %q, kept as %q; want wrong_key", a1.RefusedCause(), store.RefusedCauseText(a1))
	}
	f.seen(a1)
	f.seen(poll("b", at(0))) // a batch writes only instances recorded
	f.seenBatch(b1)
	f.wantInstances("acme", []store.Instance{listedAs(a1), listedAs(b1)})
	if got, err := f.s.InstanceList(f.ctx, "acme"); err == nil && len(got) == 2 && got[0].RefusedCause() != store.RefusedWrongKey {
		f.t.Errorf("the instance refused for a wrong key is listed with cause %q, want %q", got[0].RefusedCause(), store.RefusedWrongKey)
	}
	online(0, 2)

	// b gets the account's key of before a rotation only: refused for
	// want of a usable key, no more for a wrong key.
	b2 := poll("b", at(2*time.Second))
	b2.RefusedKeyIDs = []uint32{1}
	f.seenBatch(b2)
	f.wantInstances("acme", []store.Instance{listedAs(a1), listedAs(b2)})

	// a gets the account's profile: its first poll accepted shows it
	// online at once, refused no more.
	a2 := poll("a", at(time.Minute))
	f.seen(a2)
	f.wantInstances("acme", []store.Instance{listedAs(a2), listedAs(b2)})
	online(1, 1)
}

// testInstanceCap: with MaxPerAccount, a poll of an instance not recorded,
// while its account holds that many records, takes the place of one whose
// last poll is before EvictBefore (told to Evicted), and is
// refused (ErrTooManyInstances, nothing written) when none is; the
// recorded instances' polls are written as before, and another account is
// not bounded by this one's.
func testInstanceCap(f *fixture) {
	f.account("acme")
	f.account("globex")
	seen := func(account, id string, now, evictBefore time.Time) error {
		return f.s.InstanceSeen(f.ctx, store.InstanceSeenParams{Account: account, InstanceID: id, Hostname: "h", Version: "v", Now: now,
			MaxPerAccount: 2, EvictBefore: evictBefore})
	}
	for i, id := range []string{"a", "b"} {
		if err := seen("acme", id, at(time.Duration(i)*time.Second), time.Time{}); err != nil {
			f.t.Fatalf("InstanceSeen(acme, %s) under the bound: %v", id, err)
		}
	}
	if err := seen("acme", "c", at(2*time.Second), at(0)); !errors.Is(err, store.ErrTooManyInstances) {
		f.t.Errorf("InstanceSeen of a third instance of acme, bound 2, no record polled last before its EvictBefore: %v; want ErrTooManyInstances", err)
	}
	if err := seen("acme", "b", at(time.Hour), time.Time{}); err != nil {
		f.t.Errorf("InstanceSeen of a recorded instance at the bound: %v; want it written", err)
	}
	if err := seen("globex", "c", at(2*time.Second), time.Time{}); err != nil {
		f.t.Errorf("InstanceSeen of another account's instance: %v; want it written", err)
	}
	f.wantInstances("acme", []store.Instance{
		{Account: "acme", InstanceID: "a", Hostname: "h", Version: "v", LastPollAt: at(0)},
		{Account: "acme", InstanceID: "b", Hostname: "h", Version: "v", LastPollAt: at(time.Hour)},
	})
	// a's last poll is before EvictBefore: c takes its place, and Evicted
	// is told a.
	var evicted []string
	if err := f.s.InstanceSeen(f.ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "c", Hostname: "h", Version: "v", Now: at(2 * time.Hour),
		MaxPerAccount: 2, EvictBefore: at(time.Minute), Evicted: func(id string) { evicted = append(evicted, id) }}); err != nil || !slices.Equal(evicted, []string{"a"}) {
		f.t.Errorf("InstanceSeen of a new instance at the bound, a record polled last before its EvictBefore: %v, evicted %q; want it written in a's place", err, evicted)
	}
	if err := seen("acme", "d", at(2*time.Hour), at(time.Minute)); !errors.Is(err, store.ErrTooManyInstances) {
		f.t.Errorf("InstanceSeen of a new instance at the bound, every record polled since its EvictBefore: %v; want ErrTooManyInstances", err)
	}
	f.wantInstances("acme", []store.Instance{
		{Account: "acme", InstanceID: "b", Hostname: "h", Version: "v", LastPollAt: at(time.Hour)},
		{Account: "acme", InstanceID: "c", Hostname: "h", Version: "v", LastPollAt: at(2 * time.Hour)},
	})
	f.wantInstances("globex", []store.Instance{{Account: "globex", InstanceID: "c", Hostname: "h", Version: "v", LastPollAt: at(2 * time.Second)}})
}

// testInstanceCapConcurrent: polls of new instances of one account
// written at once (on one replica or several: the store's connections)
// record no more instances than MaxPerAccount (a re-review: 5 to 44 at a
// bound of 3 on PostgreSQL, each poll counting the records before any
// was written); the others are refused, no record being offline.
func testInstanceCapConcurrent(f *fixture) {
	f.account("acme")
	const polls, bound = 16, 3
	ps := make([]store.InstanceSeenParams, polls)
	for i := range ps {
		ps[i] = store.InstanceSeenParams{Account: "acme", InstanceID: fmt.Sprintf("n-%02d", i), Hostname: "h", Version: "v",
			Now: at(time.Hour), MaxPerAccount: bound, EvictBefore: at(0)}
	}
	errs := f.seenAtOnce(ps)
	written := 0
	for i, err := range errs {
		switch {
		case err == nil:
			written++
		case !errors.Is(err, store.ErrTooManyInstances):
			f.t.Errorf("InstanceSeen of new instance n-%02d: %v; want it written or ErrTooManyInstances", i, err)
		}
	}
	list, err := f.s.InstanceList(f.ctx, "acme")
	if err != nil || len(list) != bound || written != bound {
		f.t.Errorf("%d polls of new instances at once, bound %d: %d written, %d recorded (%v); want %d", polls, bound, written, len(list), err, bound)
	}
}

// testInstanceCapEvictedAtOnce: polls of recorded instances, all offline,
// written at the same moment as polls of new instances that take their
// places (their records deleted under them), never put a record back past
// MaxPerAccount (a re-review: on PostgreSQL, an upsert of a record read as
// there, deleted before it was written, made it again: 256 records at a
// bound of 3 in 200 rounds), and every poll answered as written is
// recorded (another re-review: an eviction deleted a record polled as it
// waited for it, and a poll whose record was deleted as it waited was
// answered as written, and written nowhere).
func testInstanceCapEvictedAtOnce(f *fixture) {
	f.account("acme")
	const bound = 3
	for round := range 100 {
		now := at(time.Duration(round+1) * time.Hour)
		list, err := f.s.InstanceList(f.ctx, "acme")
		if err != nil {
			f.t.Fatal(err)
		}
		ids := []string{fmt.Sprintf("new-%02d-a", round), fmt.Sprintf("new-%02d-b", round), fmt.Sprintf("new-%02d-c", round)}
		for _, in := range list {
			ids = append(ids, in.InstanceID)
		}
		ps := make([]store.InstanceSeenParams, len(ids))
		for i, id := range ids {
			ps[i] = store.InstanceSeenParams{Account: "acme", InstanceID: id, Hostname: "h2", Version: "v",
				Now: now, MaxPerAccount: bound, EvictBefore: now.Add(-time.Minute)}
		}
		errs := f.seenAtOnce(ps)
		for i, err := range errs {
			if err != nil && !errors.Is(err, store.ErrTooManyInstances) {
				f.t.Fatalf("round %d: InstanceSeen of %s: %v; want it written or ErrTooManyInstances", round, ids[i], err)
			}
		}
		if list, err = f.s.InstanceList(f.ctx, "acme"); err != nil || len(list) > bound {
			f.t.Fatalf("round %d: %d records (%v); want at most %d", round, len(list), err, bound)
		}
		// Polled at now, none of them is offline within the round: each
		// one answered as written is recorded.
		for i, err := range errs {
			if err == nil && !slices.ContainsFunc(list, func(in store.Instance) bool { return in.InstanceID == ids[i] && in.LastPollAt.Equal(now) }) {
				f.t.Fatalf("round %d: InstanceSeen of %s answered it written, but its record is not there, polled then: %+v", round, ids[i], list)
			}
		}
	}
}

// seenAtOnce records polls ps with InstanceSeen, each in a goroutine of
// its own, all let go at once, and returns their errors, in ps's order.
func (f *fixture) seenAtOnce(ps []store.InstanceSeenParams) []error {
	start := make(chan struct{})
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f.s.InstanceSeen(f.ctx, p)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}
