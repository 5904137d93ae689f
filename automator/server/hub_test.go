package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

func pending(p *poller) bool {
	select {
	case <-p.c:
		return true
	default:
		return false
	}
}

// TestEnqueueWakesExactlyOnePoller: no thundering herd.
func TestEnqueueWakesExactlyOnePoller(t *testing.T) {
	t.Parallel()
	h := newHub()
	ps := make([]*poller, 100)
	for i := range ps {
		ps[i] = h.poller("acme", "i", store.ClaimPoll{}, 1, nil, nil)
	}
	other := h.poller("other", "i", store.ClaimPoll{}, 1, nil, nil)
	h.NotifyWork("acme", 1, time.Now())
	woken := 0
	for i, p := range ps {
		if pending(p) {
			woken++
			if i != 0 {
				t.Errorf("woke poller %d, want the oldest (0)", i)
			}
		}
	}
	if woken != 1 {
		t.Fatalf("woke %d pollers, want 1", woken)
	}
	if pending(other) {
		t.Fatal("woke a poller of another account")
	}
	if got := h.waiting("acme"); got != 99 {
		t.Fatalf("%d pollers still waiting, want 99", got)
	}
}

// TestClosedPollerPassesItsWakeUpOn: a poller that leaves holding an
// unconsumed wake-up hands it to the next one, so no enqueue is lost.
func TestClosedPollerPassesItsWakeUpOn(t *testing.T) {
	t.Parallel()
	h := newHub()
	a, b := h.poller("acme", "a", store.ClaimPoll{}, 1, nil, nil), h.poller("acme", "b", store.ClaimPoll{}, 1, nil, nil)
	h.NotifyWork("acme", 1, time.Now()) // wakes a
	a.Close(time.Now())
	if !pending(b) {
		t.Fatal("the wake-up of a closed poller was lost")
	}
	b.Close(time.Now())
	if h.waiting("acme") != 0 || len(h.pollers) != 0 {
		t.Fatal("closed pollers still registered")
	}
}

func TestRearmedPollerIsWokenAgain(t *testing.T) {
	t.Parallel()
	h := newHub()
	p := h.poller("acme", "a", store.ClaimPoll{}, 1, nil, nil)
	h.NotifyWork("acme", 1, time.Now())
	if !pending(p) {
		t.Fatal("not woken")
	}
	h.NotifyWork("acme", 1, time.Now()) // p is out of the list until it re-arms
	if pending(p) {
		t.Fatal("woken while not waiting")
	}
	p.rearm()
	p.rearm() // idempotent
	if h.waiting("acme") != 1 {
		t.Fatalf("%d waiting after double rearm, want 1", h.waiting("acme"))
	}
	h.NotifyWork("acme", 5, time.Now())
	if !pending(p) {
		t.Fatal("re-armed poller not woken")
	}
}

func TestNotifyInstanceWakesOnlyThatInstance(t *testing.T) {
	t.Parallel()
	h := newHub()
	a1, a2, b := h.poller("acme", "a", store.ClaimPoll{}, 1, nil, nil), h.poller("acme", "a", store.ClaimPoll{}, 1, nil, nil), h.poller("acme", "b", store.ClaimPoll{}, 1, nil, nil)
	h.NotifyInstance("acme", "a")
	if !pending(a1) || !pending(a2) || pending(b) {
		t.Fatal("NotifyInstance woke the wrong pollers")
	}
}

func TestNotifyDoneWakesEveryWaiterOfThatUnit(t *testing.T) {
	t.Parallel()
	h := newHub()
	s1, s2, other := h.WaitDone("w1"), h.WaitDone("w1"), h.WaitDone("w2")
	defer other.Close()
	h.NotifyDone("w1", nil)
	for _, s := range []*doneSub{s1, s2} {
		select {
		case <-s.c:
		default:
			t.Fatal("waiter of w1 not woken")
		}
		s.Close() // after NotifyDone: harmless
	}
	select {
	case <-other.c:
		t.Fatal("waiter of w2 woken")
	default:
	}
}

// TestKnownEmptyLastsUntilWorkIsAnnounced: an empty claim is trusted for
// its account only while no unit was announced since and only for as long
// as asked.
func TestKnownEmptyLastsUntilWorkIsAnnounced(t *testing.T) {
	t.Parallel()
	h := newHub()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if h.knownEmpty("acme", t0, time.Second) {
		t.Fatal("known empty before any claim")
	}
	h.foundEmpty("acme", h.workSeen("acme"), t0)
	if !h.knownEmpty("acme", t0.Add(999*time.Millisecond), time.Second) {
		t.Error("not known empty right after an empty claim")
	}
	if h.knownEmpty("acme", t0.Add(time.Second), time.Second) {
		t.Error("still known empty once the claim is as old as allowed")
	}
	if h.knownEmpty("globex", t0, time.Second) {
		t.Error("another account is known empty")
	}
	h.NotifyWork("acme", 1, time.Now())
	if h.knownEmpty("acme", t0, time.Second) {
		t.Error("known empty after a unit was announced")
	}

	// A unit announced while a claim ran: that claim's empty result says
	// nothing.
	seen := h.workSeen("acme")
	h.NotifyWork("acme", 1, time.Now())
	h.foundEmpty("acme", seen, t0)
	if h.knownEmpty("acme", t0, time.Second) {
		t.Error("known empty from a claim that began before the last announcement")
	}
}

// TestRunningKnownUntilAUnitIsCutShort: an instance's look at its running
// units is trusted only while no claimed unit of the account was cancelled
// or timed out since, and only for as long as asked.
func TestRunningKnownUntilAUnitIsCutShort(t *testing.T) {
	t.Parallel()
	h := newHub()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if h.runningKnown("acme", "i-1", "run-1", t0, time.Second) {
		t.Fatal("known before any look")
	}
	h.checkedRunning("acme", "i-1", "run-1", h.cutSeen("acme"), t0, nil)
	if !h.runningKnown("acme", "i-1", "run-1", t0.Add(999*time.Millisecond), time.Second) {
		t.Error("not known right after a look")
	}
	if h.runningKnown("acme", "i-1", "run-1", t0.Add(time.Second), time.Second) {
		t.Error("still known once the look is as old as allowed")
	}
	if h.runningKnown("acme", "i-2", "run-1", t0, time.Second) {
		t.Error("another instance's units are known")
	}
	if h.runningKnown("acme", "i-1", "run-2", t0, time.Second) {
		t.Error("the units of another process with the same instance id are known")
	}
	h.NotifyInstance("acme", "i-2") // a unit of another instance was cancelled
	if h.runningKnown("acme", "i-1", "run-1", t0, time.Second) {
		t.Error("known after a unit of the account was cut short")
	}

	// A unit cut short while the look ran: that look says nothing.
	seen := h.cutSeen("acme")
	h.NotifyInstance("acme", "i-1")
	h.checkedRunning("acme", "i-1", "run-1", seen, t0, nil)
	if h.runningKnown("acme", "i-1", "run-1", t0, time.Second) {
		t.Error("known from a look that began before the last cut")
	}
}

// TestExpectWorkUntilAClaimFindsNothing: a claim expects a unit unless the
// latest empty claim of the account saw every announcement so far.
func TestExpectWorkUntilAClaimFindsNothing(t *testing.T) {
	t.Parallel()
	h := newHub()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if !h.expectWork("acme") {
		t.Error("no work expected before any claim found nothing")
	}
	h.foundEmpty("acme", h.workSeen("acme"), t0)
	if h.expectWork("acme") {
		t.Error("work expected right after a claim found nothing")
	}
	if h.expectWork("acme") {
		t.Error("work expected after a claim found nothing, with no announcement since, however old")
	}
	h.NotifyWork("acme", 1, time.Now())
	if !h.expectWork("acme") {
		t.Error("no work expected after a unit was announced")
	}
}

// TestNotifyWorkPassesOverPollersWithoutSlots: a poll with no free slot
// only waits to hear of cancels; a wake-up spent on it would be lost.
func TestNotifyWorkPassesOverPollersWithoutSlots(t *testing.T) {
	t.Parallel()
	h := newHub()
	full, free := h.poller("acme", "full", store.ClaimPoll{}, 0, nil, nil), h.poller("acme", "free", store.ClaimPoll{}, 2, nil, nil)
	h.NotifyWork("acme", 1, time.Now())
	if pending(full) || !pending(free) {
		t.Fatalf("woke full %v, free %v: want only the poller with a free slot", pending(full), pending(free))
	}
}

// parked marks p as waiting for a wake-up, as Poll does before it waits.
func parked(p *poller) *poller {
	p.park()
	return p
}

// TestReserveOnlyWhenNothingClaimableIsQueued: a unit goes straight to a
// waiting poller only when the account's latest claim found nothing and
// no unit was queued since; otherwise it would overtake a queued one.
func TestReserveOnlyWhenNothingClaimableIsQueued(t *testing.T) {
	t.Parallel()
	h := newHub()
	parked(h.poller("acme", "full", store.ClaimPoll{}, 0, nil, nil))
	h.poller("acme", "busy", store.ClaimPoll{}, 1, nil, nil) // between a wake-up and its next wait
	a, b := parked(h.poller("acme", "a", store.ClaimPoll{}, 1, nil, nil)), parked(h.poller("acme", "b", store.ClaimPoll{}, 1, nil, nil))
	if p := h.reserve("acme", time.Now(), nil, 1); p != nil {
		t.Fatal("reserved a poller before any claim found the queue empty")
	}
	h.foundEmpty("acme", h.workSeen("acme"), time.Now())
	if p := h.reserve("acme", time.Now(), nil, 1); p != a {
		t.Fatalf("reserved %v, want the oldest parked poller with a free slot (a)", p)
	}
	if h.waiting("acme") != 3 {
		t.Fatalf("%d waiting, want 3: the reserved poller leaves the list", h.waiting("acme"))
	}
	h.NotifyWork("acme", 5, time.Now()) // a unit queued elsewhere: the queue holds one
	if pending(a) {
		t.Fatal("a reserved poller was woken for queued work")
	}
	if !pending(b) {
		t.Fatal("b was not woken for queued work")
	}
	b.take()
	b.rearm()
	b.park()
	if p := h.reserve("acme", time.Now(), nil, 1); p != nil {
		t.Fatalf("reserved %s while a queued unit may wait", p.instance)
	}
	if p := h.reserve("other", time.Now(), nil, 1); p != nil {
		t.Fatal("reserved a poller of an account with none")
	}
}

func workIDs(ws []store.Work) []string {
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	return ids
}

// TestHandDeliversToAWaitingPollerOnly: a reserved poller gets its unit
// and a wake-up; one whose poll ended is refused (the unit goes back to
// the queue), and units handed that its poll never took come back from
// Close.
func TestHandDeliversToAWaitingPollerOnly(t *testing.T) {
	t.Parallel()
	h := newHub()
	h.foundEmpty("acme", 0, time.Now())
	a := parked(h.poller("acme", "a", store.ClaimPoll{}, 1, nil, nil))
	if h.reserve("acme", time.Now(), nil, 1) != a {
		t.Fatal("a not reserved")
	}
	if !h.hand(a, store.Work{ID: "w-1"}) || !pending(a) {
		t.Fatal("a waiting poller was not handed its unit")
	}
	if got := workIDs(a.take()); !slices.Equal(got, []string{"w-1"}) {
		t.Fatalf("take = %v, want [w-1]", got)
	}
	if got := a.take(); got != nil {
		t.Fatalf("second take = %v, want nothing", got)
	}
	if got := a.Close(time.Now()); got != nil {
		t.Fatalf("Close after take returned %v", got)
	}

	b := parked(h.poller("acme", "b", store.ClaimPoll{}, 1, nil, nil))
	if h.reserve("acme", time.Now(), nil, 1) != b {
		t.Fatal("b not reserved")
	}
	b.Close(time.Now())
	if h.hand(b, store.Work{ID: "w-2"}) {
		t.Fatal("handed a unit to a poller that had left")
	}

	c := parked(h.poller("acme", "c", store.ClaimPoll{}, 1, nil, nil))
	h.reserve("acme", time.Now(), nil, 1)
	h.hand(c, store.Work{ID: "w-3"})
	if got := workIDs(c.Close(time.Now())); !slices.Equal(got, []string{"w-3"}) {
		t.Fatalf("Close of a poller holding an untaken unit returned %v, want [w-3]", got)
	}

	d := parked(h.poller("acme", "d", store.ClaimPoll{}, 1, nil, nil))
	h.reserve("acme", time.Now(), nil, 1)
	h.release(d, 1)
	if !pending(d) || d.take() != nil {
		t.Fatal("a released poller was not woken to look again, or got a unit")
	}
	d.rearm()
	if h.waiting("acme") != 1 {
		t.Fatalf("%d waiting after release and rearm, want 1", h.waiting("acme"))
	}
}

// TestUnitsReservedTogetherLeaveTogether: units reserved for a poller
// before the first of them is stored all go to it, up to its free slots,
// and it is woken once, when the last of them is stored.
func TestUnitsReservedTogetherLeaveTogether(t *testing.T) {
	t.Parallel()
	h := newHub()
	h.foundEmpty("acme", 0, time.Now())
	a, b := parked(h.poller("acme", "a", store.ClaimPoll{}, 3, nil, nil)), parked(h.poller("acme", "b", store.ClaimPoll{}, 3, nil, nil))
	var got []*poller
	for range 4 {
		got = append(got, h.reserve("acme", time.Now(), nil, 1))
	}
	if got[0] != a || got[1] != a || got[2] != a || got[3] != b {
		t.Fatalf("reserved %s %s %s %s, want a a a b (a has 3 free slots)", got[0].instance, got[1].instance, got[2].instance, got[3].instance)
	}
	h.hand(a, store.Work{ID: "w-1"})
	if pending(a) {
		t.Fatal("a was woken while two of its units were still being stored")
	}
	h.release(a, 1) // one enqueue stored nothing (a duplicate)
	if pending(a) {
		t.Fatal("a was woken while one of its units was still being stored")
	}
	h.hand(a, store.Work{ID: "w-3"})
	if !pending(a) {
		t.Fatal("a was not woken when the last of its units was stored")
	}
	if ids := workIDs(a.take()); !slices.Equal(ids, []string{"w-1", "w-3"}) {
		t.Fatalf("a took %v, want [w-1 w-3]", ids)
	}

	// Once a unit is stored for b, later units go elsewhere: b is on its way.
	h.hand(b, store.Work{ID: "w-4"})
	c := parked(h.poller("acme", "c", store.ClaimPoll{}, 3, nil, nil))
	if p := h.reserve("acme", time.Now(), nil, 1); p != c {
		t.Fatalf("reserved %v after b's first unit was stored, want c", p)
	}
	h.release(c, 1)
	if ids := workIDs(b.take()); !slices.Equal(ids, []string{"w-4"}) {
		t.Fatalf("b took %v, want [w-4]", ids)
	}
}

// TestReservePassesOverPollsThatCannotTake: a poll whose caller left, or
// whose token or keys expired, is not handed a unit.
func TestReservePassesOverPollsThatCannotTake(t *testing.T) {
	t.Parallel()
	h := newHub()
	h.foundEmpty("acme", 0, time.Now())
	cutoff := time.Now()
	parked(h.poller("acme", "expired", store.ClaimPoll{}, 1, func(now time.Time, _ []byte) bool { return now.Before(cutoff) }, nil))
	ok := parked(h.poller("acme", "ok", store.ClaimPoll{}, 1, func(time.Time, []byte) bool { return true }, nil))
	if p := h.reserve("acme", cutoff, nil, 1); p != ok {
		t.Fatalf("reserved %v, want the poll that can take units", p)
	}
}

// TestReservePassesOverPollsAuthenticatedBeforeATokenRotation: an enqueue
// that read a current token other than the one a waiting poll's
// authentication saw hands it nothing: the token may have been withdrawn
// since. A poll authenticated after the rotation, with the new token or the
// previous one in its overlap, is handed units; so is the stale poll once
// it looked its token up again and found it still good.
func TestReservePassesOverPollsAuthenticatedBeforeATokenRotation(t *testing.T) {
	t.Parallel()
	h := newHub()
	now := time.Now()
	h.foundEmpty("acme", 0, now)
	t1, t2 := []byte("token 1 hash"), []byte("token 2 hash")
	stale := newPollToken(proxyToken{hash: t1, current: t1})
	previous := newPollToken(proxyToken{hash: t1, current: t2, until: now.Add(time.Hour)})
	a := parked(h.poller("acme", "stale", store.ClaimPoll{}, 1, stale.takes, nil))
	b := parked(h.poller("acme", "previous", store.ClaimPoll{}, 1, previous.takes, nil))
	c := parked(h.poller("acme", "new", store.ClaimPoll{}, 1, newPollToken(proxyToken{hash: t2, current: t2}).takes, nil))
	if p := h.reserve("acme", now, t2, 1); p != b {
		t.Fatalf("reserved %v, want the poll authenticated with the previous token after the rotation", p)
	}
	if p := h.reserve("acme", now, t2, 1); p != c {
		t.Fatalf("reserved %v, want the poll with the new token", p)
	}
	if p := h.reserve("acme", now, t2, 1); p != nil {
		t.Fatalf("reserved %s, authenticated before the rotation", p.instance)
	}
	if !a.takes(now, nil) {
		t.Fatal("the stale poll is not woken to look its token up again")
	}
	stale.renew(store.Account{TokenHash: t2, PreviousTokenUntil: now.Add(time.Hour)})
	if p := h.reserve("acme", now, t2, 1); p != a {
		t.Fatalf("reserved %v, want the poll whose token is still good", p)
	}
}

// TestNotifyWorkPassesOverPollsThatCannotTake: a poll whose caller left,
// or whose token or keys expired, claims nothing: the wake-up goes to the
// next poll, and it stays in the list for its units' cancels.
func TestNotifyWorkPassesOverPollsThatCannotTake(t *testing.T) {
	t.Parallel()
	h := newHub()
	cutoff := time.Now()
	expired := h.poller("acme", "expired", store.ClaimPoll{}, 1, func(now time.Time, _ []byte) bool { return now.Before(cutoff) }, nil)
	ok := h.poller("acme", "ok", store.ClaimPoll{}, 1, nil, nil)
	h.NotifyWork("acme", 1, cutoff)
	if we, wo := pending(expired), pending(ok); we || !wo {
		t.Fatalf("woke expired %v, ok %v: want only the poll that can take", we, wo)
	}
	if h.waiting("acme") != 1 {
		t.Fatalf("%d waiting, want 1: the expired poll still waits", h.waiting("acme"))
	}
	h.NotifyInstance("acme", "expired")
	if !pending(expired) {
		t.Fatal("the expired poll is not told of its units' cancels")
	}
}

// TestLeavingPollWaitsForUnitsBeingStored: a poll whose window ends while
// a unit is being stored as its claim waits for it and takes it.
func TestLeavingPollWaitsForUnitsBeingStored(t *testing.T) {
	t.Parallel()
	h := newHub()
	h.foundEmpty("acme", 0, time.Now())
	p := parked(h.poller("acme", "a", store.ClaimPoll{}, 2, nil, nil))
	h.reserve("acme", time.Now(), nil, 1)
	// The poll is leaving once leave has taken it out of the waiting
	// list, which leave's goroutine may not have done 50 ms later on a
	// loaded machine: the hook says when it has.
	detached := make(chan struct{})
	h.testHookLeft = func(string, string, int) { close(detached) }
	left := make(chan struct{})
	go func() { p.leave(t.Context()); close(left) }()
	waittest.Recv(t, detached, "leave to take the poll out of the waiting list")
	select {
	case <-left:
		t.Fatal("leave returned while a unit was still being stored for the poll")
	case <-time.After(50 * time.Millisecond):
	}
	if q := h.reserve("acme", time.Now(), nil, 1); q != nil {
		t.Fatal("a leaving poll was reserved again")
	}
	h.hand(p, store.Work{ID: "w-1"})
	waittest.Recv(t, left, "leave to return once the unit stored for the poll was handed")
	if ids := workIDs(p.take()); !slices.Equal(ids, []string{"w-1"}) {
		t.Fatalf("the leaving poll took %v, want [w-1]", ids)
	}
}

// TestAClaimingPollerTakesUnitsQueuedMeanwhile: while its own claim is
// under way a poller may be handed units whatever the queue holds, at most
// its limit; claimDone waits for those being stored and returns them,
// leaves no wake-up behind, and puts the poller back in the waiting list.
func TestAClaimingPollerTakesUnitsQueuedMeanwhile(t *testing.T) {
	t.Parallel()
	h := newHub()
	h.NotifyWork("acme", 1, time.Now())                              // a unit is queued: no claim has found the queue empty
	parked(h.poller("acme", "idle", store.ClaimPoll{}, 4, nil, nil)) // waits, not claiming
	a := h.poller("acme", "a", store.ClaimPoll{}, 4, nil, nil)
	a.parkWhileClaiming(2)
	if p := h.reserve("acme", time.Now(), nil, 1); p != a {
		t.Fatalf("reserved %v, want a: its claim takes what is queued", p)
	}
	if p := h.reserve("acme", time.Now(), nil, 1); p != a {
		t.Fatalf("reserved %v for the second unit, want a (limit 2)", p)
	}
	if p := h.reserve("acme", time.Now(), nil, 1); p != nil {
		t.Fatalf("reserved %s for a third unit: a's limit is 2, and %s's poll is not claiming", p.instance, p.instance)
	}
	h.hand(a, store.Work{ID: "w-1"})
	done := make(chan []store.Work)
	go func() { done <- a.claimDone(t.Context()) }()
	select {
	case got := <-done:
		t.Fatalf("claimDone returned %v while a unit was still being stored", workIDs(got))
	case <-time.After(50 * time.Millisecond):
	}
	h.hand(a, store.Work{ID: "w-2"})
	if got := workIDs(waittest.Recv(t, done, "claimDone to return once the units stored for it were handed")); !slices.Equal(got, []string{"w-1", "w-2"}) {
		t.Fatalf("claimDone returned %v, want [w-1 w-2]", got)
	}
	if pending(a) {
		t.Fatal("a holds a wake-up: its poll would pass it on as queued work")
	}
	if h.waiting("acme") != 2 {
		t.Fatalf("%d waiting, want 2: a is back in the list", h.waiting("acme"))
	}
	if p := h.reserve("acme", time.Now(), nil, 1); p != nil {
		t.Fatalf("reserved %s after a's claim ended, with a unit queued", p.instance)
	}
}

// TestDrainedRecently: a claim that took fewer units than it asked for
// counts for a while; a full one, or time, ends it.
func TestDrainedRecently(t *testing.T) {
	t.Parallel()
	h := newHub()
	now := time.Now()
	if h.drainedRecently("acme", now, time.Second) {
		t.Fatal("drained before any claim")
	}
	h.claimEnded("acme", true, now)
	if !h.drainedRecently("acme", now.Add(500*time.Millisecond), time.Second) {
		t.Fatal("a short claim half a second ago does not count")
	}
	if h.drainedRecently("acme", now.Add(2*time.Second), time.Second) {
		t.Fatal("a short claim two seconds ago still counts")
	}
	if h.drainedRecently("other", now, time.Second) {
		t.Fatal("another account's claim counts")
	}
	h.claimEnded("acme", false, now)
	if h.drainedRecently("acme", now, time.Second) {
		t.Fatal("drained after a full claim")
	}
}

// TestRetellAtOnlyForUnitsTheLookTold: a poll that lists a unit its
// process's latest look found ended may look again once that look is no
// longer fresh; one listing other units waits as usual.
func TestRetellAtOnlyForUnitsTheLookTold(t *testing.T) {
	t.Parallel()
	h := newHub()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok := h.retellAt("acme", "i-1", "run-1", []string{"w-1"}, time.Second); ok {
		t.Error("a retell before any look")
	}
	h.checkedRunning("acme", "i-1", "run-1", h.cutSeen("acme"), t0, []string{"w-1"})
	if at, ok := h.retellAt("acme", "i-1", "run-1", []string{"w-2", "w-1"}, time.Second); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Errorf("retellAt for a poll listing the told unit: %v, %v; want %v, true", at, ok, t0.Add(time.Second))
	}
	if _, ok := h.retellAt("acme", "i-1", "run-1", []string{"w-2"}, time.Second); ok {
		t.Error("a retell for a poll listing only units the look did not tell")
	}
	if _, ok := h.retellAt("acme", "i-1", "run-2", []string{"w-1"}, time.Second); ok {
		t.Error("a retell for another process of the instance")
	}
	h.checkedRunning("acme", "i-1", "run-1", h.cutSeen("acme"), t0.Add(time.Second), nil)
	if _, ok := h.retellAt("acme", "i-1", "run-1", []string{"w-1"}, time.Second); ok {
		t.Error("a retell after a later look that told nothing")
	}
}

// TestTheLooksHoldABoundedNumberOfTellings: the units the processes'
// latest looks told ended are held within maxCheckedTold ids in all,
// however many processes look (a token's holder polling under ever new
// run ids, each listing thousands of ended units: a review measured the
// looks growing by 270 KiB a poll), and a process's look that replaces its
// earlier one counts once.
func TestTheLooksHoldABoundedNumberOfTellings(t *testing.T) {
	t.Parallel()
	h := newHub()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	told := make([]string, maxRunning)
	for i := range told {
		told[i] = fmt.Sprintf("w_%032d", i)
	}
	for range 3 {
		h.checkedRunning("acme", "i-1", "run-0", h.cutSeen("acme"), t0, told)
	}
	if h.checkedTold != len(told) {
		t.Fatalf("one process's look made 3 times holds %d ids; want %d", h.checkedTold, len(told))
	}
	runs := 2 * maxCheckedTold / maxRunning
	for i := range runs {
		h.checkedRunning("acme", "i-1", fmt.Sprintf("run-%d", i+1), h.cutSeen("acme"), t0, told)
		n := 0
		for _, c := range h.checked {
			n += len(c.told)
		}
		if n > maxCheckedTold || n != h.checkedTold {
			t.Fatalf("after %d looks of %d ids each, the looks hold %d ids (counted %d); want at most %d", i+2, len(told), n, h.checkedTold, maxCheckedTold)
		}
	}
	if _, ok := h.retellAt("acme", "i-1", fmt.Sprintf("run-%d", runs), told[:1], time.Second); !ok {
		t.Error("the latest look is not held")
	}
}

// TestAWakeUpGoesToAPollerHeardFromLately: a unit announced is claimed by
// the oldest waiting poller whose connection was heard from within
// quietAfter; one silent for longer (its host may have lost power) is
// woken only when no other waits.
func TestAWakeUpGoesToAPollerHeardFromLately(t *testing.T) {
	t.Parallel()
	h := newHub()
	silent := func() time.Duration { return quietAfter + time.Second }
	heard := func() time.Duration { return time.Second }
	gone := h.poller("acme", "gone", store.ClaimPoll{}, 1, nil, silent)
	live := h.poller("acme", "live", store.ClaimPoll{}, 1, nil, heard)
	unknown := h.poller("acme", "unknown", store.ClaimPoll{}, 1, nil, nil)

	h.NotifyWork("acme", 1, time.Now())
	if pending(gone) || !pending(live) || pending(unknown) {
		t.Fatalf("woken: gone %v, live %v, unknown %v; want live alone", pending(gone), pending(live), pending(unknown))
	}
	h.NotifyWork("acme", 1, time.Now())
	if pending(gone) || !pending(unknown) {
		t.Fatal("the second wake-up did not go to the poller whose connection's silence is not known")
	}
	h.NotifyWork("acme", 1, time.Now())
	if !pending(gone) {
		t.Fatal("the silent poller, the only one left, was not woken")
	}
	for _, p := range []*poller{gone, live, unknown} {
		p.Close(time.Now())
	}
}

// TestUnitsHandedToAPollFitInOneAnswer: units reserved for a waiting poll
// carry at most claimBytes of sealed commands together (the first whatever
// its size), and at most fillBytes, none past it, while the poll's own
// claim is under way: its answer is one message, and a unit handed to it
// cannot be put back. A unit that does not fit is left to the queue.
func TestUnitsHandedToAPollFitInOneAnswer(t *testing.T) {
	t.Parallel()
	h := newHub()
	h.foundEmpty("acme", 0, time.Now())
	solo := parked(h.poller("acme", "solo", store.ClaimPoll{}, 8, nil, nil))
	if p := h.reserve("acme", time.Now(), nil, claimBytes+1); p != solo {
		t.Fatalf("reserved %v for a unit larger than claimBytes, want solo: the first unit always fits", p)
	}
	if p := h.reserve("acme", time.Now(), nil, 1); p != nil {
		t.Fatalf("reserved %s for a second unit behind one larger than claimBytes", p.instance)
	}
	h.hand(solo, store.Work{ID: "w-1"})

	a := parked(h.poller("acme", "a", store.ClaimPoll{}, 8, nil, nil))
	big := 3 << 20
	if p := h.reserve("acme", time.Now(), nil, big); p != a {
		t.Fatalf("reserved %v for the first unit, want a", p)
	}
	if p := h.reserve("acme", time.Now(), nil, big); p != a {
		t.Fatalf("reserved %v for the second unit (6 MiB in all), want a", p)
	}
	if p := h.reserve("acme", time.Now(), nil, big); p != nil {
		t.Fatalf("reserved %s for a third unit: 9 MiB would not fit in its answer", p.instance)
	}

	c := h.poller("acme", "c", store.ClaimPoll{}, 8, nil, nil)
	c.parkWhileClaiming(4)
	if p := h.reserve("acme", time.Now(), nil, fillBytes+1); p != nil {
		t.Fatalf("reserved %s for a unit past fillBytes while its claim is under way", p.instance)
	}
	if p := h.reserve("acme", time.Now(), nil, fillBytes/2); p != c {
		t.Fatalf("reserved %v for a unit within fillBytes, want c", p)
	}
	if p := h.reserve("acme", time.Now(), nil, fillBytes/2+1); p != nil {
		t.Fatalf("reserved %s for a unit taking c past fillBytes", p.instance)
	}
}
