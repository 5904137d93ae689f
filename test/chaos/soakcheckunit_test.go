//go:build linux

package chaos

import (
	"strings"
	"testing"
	"time"
)

// soakUnitAt is a unit of kind queued at sec seconds of t0, claimed by
// claimer, that ended as it should.
func soakUnitAt(kind soakKind, id string, sec float64, claimer string) soakUnit {
	u := soakUnit{Kind: kind}
	u.Key, u.WorkID, u.Claimer, u.ResultInstance = "k-"+id, id, claimer, claimer
	u.QueuedAt, u.SubmittedAt = at(sec), at(sec)
	u.Deadline = at(sec + 10)
	u.FinishedAt, u.SeenAt, u.Seen = at(sec+0.1), at(sec+0.1), true
	switch kind {
	case soakPing:
		u.State, u.HasResult, u.Stdout = StateSucceeded, true, "instance_id="+claimer+"\nhostname=h\n"
	case soakEcho:
		u.State, u.HasResult, u.Stdout, u.WantStdout = StateSucceeded, true, "t:in\n", "t:in\n"
	case soakTimeout:
		u.State, u.Deadline = StateTimedOut, at(sec+1.5)
		u.FinishedAt, u.SeenAt = at(sec+1.6), at(sec+1.6)
	}
	return u
}

// The soak's check of its load: a script run twice, a unit that ended
// otherwise than its kind says with nothing to explain it, a late timeout
// and a caller error each fail it, named; a claim lost with its claimer's
// reset connection is excused as disturbed, and a reset of the callers'
// connection excuses nothing but a caller learning of a timeout late; a
// stall of the whole machine excuses the time it lasted, and no more.
func TestSoakCheckFailsBrokenGuaranteesAndExcusesOnlyDisturbedUnits(t *testing.T) {
	ok := []soakUnit{soakUnitAt(soakPing, "w1", 1, "p1"), soakUnitAt(soakEcho, "w2", 2, "p2"), soakUnitAt(soakTimeout, "w3", 3, "p3")}
	execs := []Exec{{WorkID: "w2", Instance: "p2", Start: at(2.05), End: at(2.08)}, {WorkID: "w3", Instance: "p3", Start: at(3.05)}}
	readAt := at(100)
	if c := checkSoak(ok, execs, nil, readAt); c.Err() != nil || c.ByKind[soakPing].AsExpected != 1 || c.ByKind[soakTimeout].AsExpected != 1 {
		t.Fatalf("a clean load: %v\n%s", c.Err(), c.Table())
	}

	// A lost claim of p2 while its relay reset it: disturbed, excused.
	lost := soakUnitAt(soakPing, "w4", 20, "p2")
	lost.State, lost.Reason, lost.HasResult = StateFailed, "its claim never reached instance p2"+UndeliveredReason, false
	events := []soakEvent{{Kind: evRelayReset, Target: "p2", Start: at(20.05), End: at(20.05)}, {Kind: evCallerReset, Target: Callers, Start: at(40), End: at(40)}}
	c := checkSoak(append(ok, lost), execs, events, readAt)
	if c.Err() != nil || c.ByKind[soakPing].Disturbed != 1 {
		t.Fatalf("a claim lost with its claimer's reset connection: %v, disturbed %d; want excused\n%s", c.Err(), c.ByKind[soakPing].Disturbed, c.Table())
	}

	with := func(u soakUnit, change func(*soakUnit)) soakUnit { change(&u); return u }

	// A timeout ended 5.4 s after its deadline, 4.9 s of which the
	// machine stood still (a paused virtual machine): 0.5 s late, excused;
	// and a claim of p1 lost during the stall, though nothing disturbed p1.
	stalled := with(soakUnitAt(soakTimeout, "w9", 80, "p1"), func(u *soakUnit) { u.FinishedAt, u.SeenAt = at(86.9), at(86.95) })
	lostInStall := with(lost, func(u *soakUnit) {
		u.WorkID, u.Claimer, u.QueuedAt, u.FinishedAt, u.SeenAt = "w10", "p1", at(82.5), at(82.6), at(82.6)
	})
	stall := soakEvent{Kind: evMachineStall, Target: Machine, Start: at(82), End: at(86.9)}
	c = checkSoak(append(append([]soakUnit(nil), ok...), stalled, lostInStall), append(execs, Exec{WorkID: "w9", Instance: "p1", Start: at(80.05)}), append(events, stall), readAt)
	if c.Err() != nil || c.ByKind[soakPing].Disturbed != 1 || c.Stalls != 1 || c.MaxLate > 200*time.Millisecond {
		t.Fatalf("a timeout late by the time the machine stood still, and a claim lost then: %v, disturbed %d, stalls %d, latest %v; want both excused, the stall counted, its unit's lateness not the latest\n%s", c.Err(), c.ByKind[soakPing].Disturbed, c.Stalls, c.MaxLate, c.Table())
	}
	for _, bad := range []struct {
		name  string
		unit  soakUnit
		execs []Exec
		want  string
	}{
		{"run twice", soakUnitAt(soakEcho, "w5", 30, "p1"),
			[]Exec{{WorkID: "w5", Instance: "p1", Start: at(30.01), End: at(30.02)}, {WorkID: "w5", Instance: "p1", Start: at(30.03), End: at(30.04)}}, RuleAtMostOnce},
		// The same lost claim, but a reset of the callers' connection is
		// all that happened: no excuse.
		{"unexplained", with(lost, func(u *soakUnit) { u.QueuedAt, u.FinishedAt, u.SeenAt = at(40), at(40.1), at(40.1) }), nil, RuleOutput},
		{"late timeout", with(soakUnitAt(soakTimeout, "w6", 50, "p1"), func(u *soakUnit) { u.FinishedAt, u.SeenAt = at(54), at(54) }),
			[]Exec{{WorkID: "w6", Instance: "p1", Start: at(50.05)}}, RuleDeadline},
		{"caller told late", with(soakUnitAt(soakTimeout, "w7", 60, "p1"), func(u *soakUnit) { u.SeenAt = at(66) }),
			[]Exec{{WorkID: "w7", Instance: "p1", Start: at(60.05)}}, "learnt of its timeout"},
		// Late by more than the machine stood still (90.5 s, 1 s of it).
		{"late past a stall", with(soakUnitAt(soakTimeout, "w11", 89, "p1"), func(u *soakUnit) { u.FinishedAt, u.SeenAt = at(95), at(95) }),
			[]Exec{{WorkID: "w11", Instance: "p1", Start: at(89.05)}}, "1s of it with the machine standing still"},
		{"not killed", soakUnitAt(soakTimeout, "w8", 70, "p1"),
			[]Exec{{WorkID: "w8", Instance: "p1", Start: at(70.05), End: at(100.05)}}, "ran to its end"},
		{"caller error", soakUnit{Kind: soakCancel, Err: "Cancel: rpc error: code = Internal"}, nil, "CALLER ERRORS: 1"},
	} {
		c := checkSoak(append(append([]soakUnit(nil), ok...), bad.unit), append(append([]Exec(nil), execs...), bad.execs...), append(events, soakEvent{Kind: evMachineStall, Target: Machine, Start: at(91), End: at(92)}), at(200))
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want a failure saying %q", bad.name, err, bad.want)
		}
	}
}
