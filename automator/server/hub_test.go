package server

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
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
	h := newHub()
	ps := make([]*poller, 100)
	for i := range ps {
		ps[i] = h.poller("acme", "i", 1)
	}
	other := h.poller("other", "i", 1)
	h.NotifyWork("acme", 1)
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
	h := newHub()
	a, b := h.poller("acme", "a", 1), h.poller("acme", "b", 1)
	h.NotifyWork("acme", 1) // wakes a
	a.Close()
	if !pending(b) {
		t.Fatal("the wake-up of a closed poller was lost")
	}
	b.Close()
	if h.waiting("acme") != 0 || len(h.pollers) != 0 {
		t.Fatal("closed pollers still registered")
	}
}

func TestRearmedPollerIsWokenAgain(t *testing.T) {
	h := newHub()
	p := h.poller("acme", "a", 1)
	h.NotifyWork("acme", 1)
	if !pending(p) {
		t.Fatal("not woken")
	}
	h.NotifyWork("acme", 1) // p is out of the list until it re-arms
	if pending(p) {
		t.Fatal("woken while not waiting")
	}
	p.rearm()
	p.rearm() // idempotent
	if h.waiting("acme") != 1 {
		t.Fatalf("%d waiting after double rearm, want 1", h.waiting("acme"))
	}
	h.NotifyWork("acme", 5)
	if !pending(p) {
		t.Fatal("re-armed poller not woken")
	}
}

func TestNotifyInstanceWakesOnlyThatInstance(t *testing.T) {
	h := newHub()
	a1, a2, b := h.poller("acme", "a", 1), h.poller("acme", "a", 1), h.poller("acme", "b", 1)
	h.NotifyInstance("acme", "a")
	if !pending(a1) || !pending(a2) || pending(b) {
		t.Fatal("NotifyInstance woke the wrong pollers")
	}
}

func TestNotifyDoneWakesEveryWaiterOfThatUnit(t *testing.T) {
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
	h.NotifyWork("acme", 1)
	if h.knownEmpty("acme", t0, time.Second) {
		t.Error("known empty after a unit was announced")
	}

	// A unit announced while a claim ran: that claim's empty result says
	// nothing.
	seen := h.workSeen("acme")
	h.NotifyWork("acme", 1)
	h.foundEmpty("acme", seen, t0)
	if h.knownEmpty("acme", t0, time.Second) {
		t.Error("known empty from a claim that began before the last announcement")
	}
}

// TestRunningKnownUntilAUnitIsCutShort: an instance's look at its running
// units is trusted only while no claimed unit of the account was cancelled
// or timed out since, and only for as long as asked.
func TestRunningKnownUntilAUnitIsCutShort(t *testing.T) {
	h := newHub()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if h.runningKnown("acme", "i-1", t0, time.Second) {
		t.Fatal("known before any look")
	}
	h.checkedRunning("acme", "i-1", h.cutSeen("acme"), t0)
	if !h.runningKnown("acme", "i-1", t0.Add(999*time.Millisecond), time.Second) {
		t.Error("not known right after a look")
	}
	if h.runningKnown("acme", "i-1", t0.Add(time.Second), time.Second) {
		t.Error("still known once the look is as old as allowed")
	}
	if h.runningKnown("acme", "i-2", t0, time.Second) {
		t.Error("another instance's units are known")
	}
	h.NotifyInstance("acme", "i-2") // a unit of another instance was cancelled
	if h.runningKnown("acme", "i-1", t0, time.Second) {
		t.Error("known after a unit of the account was cut short")
	}

	// A unit cut short while the look ran: that look says nothing.
	seen := h.cutSeen("acme")
	h.NotifyInstance("acme", "i-1")
	h.checkedRunning("acme", "i-1", seen, t0)
	if h.runningKnown("acme", "i-1", t0, time.Second) {
		t.Error("known from a look that began before the last cut")
	}
}

// TestExpectWorkUntilAClaimFindsNothing: a claim expects a unit unless the
// latest empty claim of the account saw every announcement so far.
func TestExpectWorkUntilAClaimFindsNothing(t *testing.T) {
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
	h.NotifyWork("acme", 1)
	if !h.expectWork("acme") {
		t.Error("no work expected after a unit was announced")
	}
}

// TestNotifyWorkPassesOverPollersWithoutSlots: a poll with no free slot
// only waits to hear of cancels; a wake-up spent on it would be lost.
func TestNotifyWorkPassesOverPollersWithoutSlots(t *testing.T) {
	h := newHub()
	full, free := h.poller("acme", "full", 0), h.poller("acme", "free", 2)
	h.NotifyWork("acme", 1)
	if pending(full) || !pending(free) {
		t.Fatalf("woke full %v, free %v: want only the poller with a free slot", pending(full), pending(free))
	}
}

// TestReserveOnlyWhenNothingClaimableIsQueued: a unit goes straight to a
// waiting poller only when the account's latest claim found nothing and
// no unit was queued since; otherwise it would overtake a queued one.
func TestReserveOnlyWhenNothingClaimableIsQueued(t *testing.T) {
	h := newHub()
	h.poller("acme", "full", 0)
	a, b := h.poller("acme", "a", 1), h.poller("acme", "b", 1)
	if p := h.reserve("acme"); p != nil {
		t.Fatal("reserved a poller before any claim found the queue empty")
	}
	h.foundEmpty("acme", h.workSeen("acme"), time.Now())
	if p := h.reserve("acme"); p != a {
		t.Fatalf("reserved %v, want the oldest poller with a free slot (a)", p)
	}
	if h.waiting("acme") != 2 {
		t.Fatalf("%d waiting, want 2: the reserved poller leaves the list", h.waiting("acme"))
	}
	h.NotifyWork("acme", 5) // a unit queued elsewhere: the queue holds one
	if pending(a) {
		t.Fatal("a reserved poller was woken for queued work")
	}
	if !pending(b) {
		t.Fatal("b was not woken for queued work")
	}
	b.rearm()
	if p := h.reserve("acme"); p != nil {
		t.Fatalf("reserved %s while a queued unit may wait", p.instance)
	}
	if p := h.reserve("other"); p != nil {
		t.Fatal("reserved a poller of an account with none")
	}
}

// TestHandDeliversToAWaitingPollerOnly: a reserved poller gets its unit
// and a wake-up; one whose poll ended is refused (the unit goes back to
// the queue), and a handed unit its poll never took comes back from Close.
func TestHandDeliversToAWaitingPollerOnly(t *testing.T) {
	h := newHub()
	h.foundEmpty("acme", 0, time.Now())
	a := h.poller("acme", "a", 1)
	if h.reserve("acme") != a {
		t.Fatal("a not reserved")
	}
	u := &store.Work{ID: "w-1"}
	if !h.hand(a, u) || !pending(a) {
		t.Fatal("a waiting poller was not handed its unit")
	}
	if got := a.take(); got != u {
		t.Fatalf("take = %v, want the handed unit", got)
	}
	if got := a.take(); got != nil {
		t.Fatalf("second take = %v, want nothing", got)
	}
	if got := a.Close(); got != nil {
		t.Fatalf("Close after take returned %v", got)
	}

	b := h.poller("acme", "b", 1)
	if h.reserve("acme") != b {
		t.Fatal("b not reserved")
	}
	b.Close()
	if h.hand(b, &store.Work{ID: "w-2"}) {
		t.Fatal("handed a unit to a poller that had left")
	}

	c := h.poller("acme", "c", 1)
	h.reserve("acme")
	h.hand(c, &store.Work{ID: "w-3"})
	if got := c.Close(); got == nil || got.ID != "w-3" {
		t.Fatalf("Close of a poller holding an untaken unit returned %v, want w-3", got)
	}

	d := h.poller("acme", "d", 1)
	h.reserve("acme")
	h.release(d)
	if !pending(d) || d.take() != nil {
		t.Fatal("a released poller was not woken to look again, or got a unit")
	}
	d.rearm()
	if h.waiting("acme") != 1 {
		t.Fatalf("%d waiting after release and rearm, want 1", h.waiting("acme"))
	}
}
