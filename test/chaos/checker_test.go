package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// cleanHistory is a small history in which every guarantee holds: units
// that succeeded, one that failed (unknown script), one that ran past its
// deadline, one whose claimer was killed, one claimed just before the
// automator crashed, and one that lived across the crash.
func cleanHistory() History {
	ok := func(id, inst string, q, c, f float64) (Unit, Exec) {
		return Unit{
				Key: "k-" + id, WorkID: id, Expect: ExpectOutput, WantStdout: "out-" + id + "\n", WantExit: 1, Timeout: 10 * time.Second,
				SubmittedAt: at(q), QueuedAt: at(q), Deadline: at(q + 10), ClaimedAt: at(c), FinishedAt: at(f),
				Seen: true, SeenAt: at(f + 0.01), State: StateSucceeded, Claimer: inst,
				HasResult: true, ResultInstance: inst, ExitCode: 1, Stdout: "out-" + id + "\n", FinalState: StateSucceeded,
			}, Exec{
				WorkID: id, Instance: inst, Start: at(c + 0.01), End: at(f - 0.01),
			}
	}
	h := History{Instances: []string{"a", "b"}}
	add := func(u Unit, e Exec) { h.Units = append(h.Units, u); h.Execs = append(h.Execs, e) }
	add(ok("w1", "a", 0, 0.1, 0.2))
	add(ok("w2", "b", 0, 0.1, 0.3))
	// Alive across an automator outage (30-31s): it succeeds after it.
	add(ok("w3", "a", 29.5, 29.6, 31.5))
	h.Units = append(h.Units,
		Unit{Key: "k-w4", WorkID: "w4", Expect: ExpectFailed, SubmittedAt: at(1), QueuedAt: at(1), Deadline: at(11), ClaimedAt: at(1.1), FinishedAt: at(1.2),
			Seen: true, SeenAt: at(1.2), State: StateFailed, Reason: "unknown script", Claimer: "b", FinalState: StateFailed},
		// Runs past its deadline: killed at 12s, times out at 12s.
		Unit{Key: "k-w5", WorkID: "w5", Expect: ExpectTimedOut, SubmittedAt: at(10), QueuedAt: at(10), Deadline: at(12), ClaimedAt: at(10.1), FinishedAt: at(12.05),
			Seen: true, SeenAt: at(12.06), State: StateTimedOut, Claimer: "a", FinalState: StateTimedOut},
		// Its claimer b is killed at 21s; it times out at its deadline.
		Unit{Key: "k-w6", WorkID: "w6", Expect: ExpectOutput, WantStdout: "x", SubmittedAt: at(20), QueuedAt: at(20), Deadline: at(30), ClaimedAt: at(20.5), FinishedAt: at(30.1),
			Seen: true, SeenAt: at(31.2), State: StateTimedOut, Claimer: "b", FinalState: StateTimedOut},
		// Claimed just before the automator crashed at 30s; its deadline
		// falls in the outage, so it ends when the automator is back.
		Unit{Key: "k-w7", WorkID: "w7", Expect: ExpectOutput, WantStdout: "x", SubmittedAt: at(20.5), QueuedAt: at(20.5), Deadline: at(30.5), ClaimedAt: at(29.99), FinishedAt: at(31.1),
			Seen: true, SeenAt: at(31.3), State: StateTimedOut, Claimer: "a", FinalState: StateTimedOut},
	)
	h.Execs = append(h.Execs, Exec{WorkID: "w5", Instance: "a", Start: at(10.2)}, Exec{WorkID: "w6", Instance: "b", Start: at(20.6), End: at(20.7)})
	h.Faults = []Fault{
		{Kind: "proxy-kill", Targets: []string{"b"}, Start: at(21), End: at(22)},
		{Kind: "automator-kill", Targets: []string{Automator}, Start: at(30), End: at(31)},
		{Kind: "net-latency", Targets: []string{"a"}, Start: at(2), End: at(3)},
	}
	return h
}

func TestCheckerPassesACleanHistory(t *testing.T) {
	r := Check(cleanHistory(), Options{})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	want := Report{Units: 7, Succeeded: 3, Failed: 1, TimedOut: 3, TimedOutExpected: 1, TimedOutClaimerFault: 1, TimedOutAutomator: 1, Executions: 5}
	if r.Units != want.Units || r.Succeeded != want.Succeeded || r.Failed != want.Failed || r.TimedOut != want.TimedOut ||
		r.TimedOutExpected != want.TimedOutExpected || r.TimedOutClaimerFault != want.TimedOutClaimerFault ||
		r.TimedOutAutomator != want.TimedOutAutomator || r.Executions != want.Executions {
		t.Fatalf("report %+v, want counts %+v", r, want)
	}
	if r.AcrossRestart != 3 || r.AcrossRestartSucceeded != 1 {
		t.Errorf("across restart %d (%d succeeded), want 3 (1)", r.AcrossRestart, r.AcrossRestartSucceeded)
	}
	table := r.Table()
	for _, s := range []string{"| 7 | 3 | 1 | 3 | 0 | 0 |", "| automator-kill | 1 |", "| proxy-kill | 1 |", "| **all** | 3 |"} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q:\n%s", s, table)
		}
	}
}

// mustBreak checks that the checker fails loudly, naming the rule.
func mustBreak(t *testing.T, h History, rule string) Report {
	t.Helper()
	r := Check(h, Options{})
	err := r.Err()
	if err == nil {
		t.Fatalf("the checker accepted a history that breaks %q", rule)
	}
	if !strings.Contains(err.Error(), "GUARANTEES BROKEN") || !strings.Contains(err.Error(), rule) {
		t.Fatalf("the error does not say loudly that %q broke:\n%v", rule, err)
	}
	for _, v := range r.Violations {
		if v.Rule != rule {
			t.Errorf("unexpected violation besides %q: %v", rule, v)
		}
	}
	return r
}

// TestCheckerFailsOnDuplicateExecution: a unit whose script ran twice, on
// two instances, breaks "at most once" and is counted in "executed twice".
func TestCheckerFailsOnDuplicateExecution(t *testing.T) {
	h := cleanHistory()
	h.Execs = append(h.Execs, Exec{WorkID: "w1", Instance: "a", Start: at(0.5), End: at(0.6)})
	r := mustBreak(t, h, RuleAtMostOnce)
	if r.ExecutedTwice != 1 {
		t.Errorf("executed twice = %d, want 1", r.ExecutedTwice)
	}
	if !strings.Contains(r.Table(), "| 7 | 3 | 1 | 3 | 1 | 0 |") {
		t.Errorf("the table does not show the unit executed twice:\n%s", r.Table())
	}

	// On another instance than its claimer, too.
	h = cleanHistory()
	h.Execs = append(h.Execs, Exec{WorkID: "w2", Instance: "a", Start: at(0.5)})
	if r := mustBreak(t, h, RuleAtMostOnce); r.ExecutedTwice != 1 {
		t.Errorf("executed twice = %d, want 1", r.ExecutedTwice)
	}
}

// TestCheckerFailsOnLostUnit: a unit the automator acknowledged whose
// caller never saw an end (its Wait kept failing), and one the automator
// forgot, are lost.
func TestCheckerFailsOnLostUnit(t *testing.T) {
	h := cleanHistory()
	// A caller that never saw the end knows no claimer either: the unit's
	// run is not blamed on that.
	h.Units[2].Seen, h.Units[2].State, h.Units[2].WaitErr, h.Units[2].Claimer = false, "", "rpc error: code = NotFound desc = work \"w3\" not found", ""
	r := mustBreak(t, h, RuleDurable)
	if r.Lost != 1 {
		t.Errorf("lost = %d, want 1", r.Lost)
	}
	if !strings.Contains(r.Table(), "| 7 | 2 | 1 | 3 | 0 | 1 |") {
		t.Errorf("the table does not show the lost unit:\n%s", r.Table())
	}

	h = cleanHistory()
	h.Units[0].FinalState = StateNotFound
	if r := mustBreak(t, h, RuleDurable); r.Lost != 1 {
		t.Errorf("lost = %d, want 1", r.Lost)
	}
}

func TestCheckerFailsOnEarlyOrLateTimeout(t *testing.T) {
	h := cleanHistory()
	h.Units[5].FinishedAt, h.Units[5].SeenAt = at(29), at(29) // deadline 30
	mustBreak(t, h, RuleDeadline)

	h = cleanHistory()
	h.Units[4].FinishedAt, h.Units[4].SeenAt = at(16), at(16) // deadline 12, automator up
	mustBreak(t, h, RuleDeadline)
}

func TestCheckerFailsOnUnexplainedTimeout(t *testing.T) {
	// w6 claimed by b at 20.5s, timed out at its deadline, 27s, well before
	// the automator crash.
	early := func(h History) History {
		h.Units[5].Deadline, h.Units[5].FinishedAt, h.Units[5].SeenAt = at(27), at(27.1), at(27.2)
		return h
	}
	if err := Check(early(cleanHistory()), Options{}).Err(); err != nil {
		t.Fatal(err) // b's kill explains it
	}
	h := early(cleanHistory())
	h.Faults = h.Faults[1:] // b was never killed: w6's timeout has no cause
	mustBreak(t, h, RuleExplained)

	// Latency alone loses nothing.
	h = early(cleanHistory())
	h.Faults[0] = Fault{Kind: "net-latency", Targets: []string{"b"}, Start: at(21), End: at(22)}
	mustBreak(t, h, RuleExplained)
}

func TestCheckerFailsWhenSurvivorsLeaveWorkUnclaimed(t *testing.T) {
	h := cleanHistory()
	h.Units[5].Claimer, h.Units[5].ClaimedAt = "", time.Time{} // a was healthy all along
	h.Execs = h.Execs[:len(h.Execs)-1]
	mustBreak(t, h, RuleSurvivors)

	// With every instance down (b killed, a idle) it is not a violation.
	h.Faults[0] = Fault{Kind: "proxy-kill", Targets: []string{"b"}, Start: at(19), End: at(30)}
	h.Idle = []Interval{{Who: "a", Start: at(19), End: at(31)}}
	if err := Check(h, Options{}).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckerFailsOnWrongOutput(t *testing.T) {
	h := cleanHistory()
	h.Units[1].Stdout = "out-w1\n" // another unit's output
	mustBreak(t, h, RuleOutput)

	h = cleanHistory()
	h.Units[3].State, h.Units[3].FinalState = StateSucceeded, StateSucceeded // an unknown script "succeeded"
	mustBreak(t, h, RuleOutput)
}

func TestCheckerFailsWhenTheTerminalStateChanges(t *testing.T) {
	h := cleanHistory()
	h.Units[0].FinalState = StateTimedOut
	mustBreak(t, h, RuleOneTerminal)
}

func TestCheckerFailsWhenAResultIsReportedAfterTheDeadline(t *testing.T) {
	h := cleanHistory()
	h.Units[4].State, h.Units[4].FinalState = StateSucceeded, StateSucceeded
	mustBreak(t, h, RuleEnforcesLate)
}

func TestParseExecLog(t *testing.T) {
	log := "S w1 a 1764504000.000100\n" +
		"S w2 b 1764504000.5\n" +
		"E w1 a 1764504000.000100 1764504001.250000\n"
	es, err := ParseExecLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].WorkID != "w1" || es[0].End.Sub(es[0].Start) != 1249900*time.Microsecond || !es[1].End.IsZero() {
		t.Fatalf("parsed %+v", es)
	}
	for _, bad := range []string{"S w1 a\n", "E w9 a 1 2\n", "S w1 a 1x\n", "S w1 a 17645040"} {
		if _, err := ParseExecLog(strings.NewReader(bad)); err == nil && bad != "S w1 a 17645040" {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

// TestCheckerCountsAReplicaFaultAsACauseNotAnOutage: with replicas, a unit
// claimed while one replica was killed may time out (its poll answer was
// lost with the replica), and its caller may learn of it once it waits on
// another replica (here 5 s after the deadline, past the 4 s allowed with
// every replica up); without that fault the same timeout is unexplained. A
// replica's death is no outage of the automator: a timeout late while it
// was down still breaks the deadline.
func TestCheckerCountsAReplicaFaultAsACauseNotAnOutage(t *testing.T) {
	unit := Unit{Key: "k-r1", WorkID: "r1", Expect: ExpectOutput, WantStdout: "x", SubmittedAt: at(50), QueuedAt: at(50), Deadline: at(60),
		ClaimedAt: at(50.1), FinishedAt: at(60.01), Seen: true, SeenAt: at(65), State: StateTimedOut, Claimer: "a", FinalState: StateTimedOut}
	replicaKill := Fault{Kind: "replica-kill", Targets: []string{"r0"}, Start: at(50.2), End: at(63.5)}
	h := History{Instances: []string{"a", "b"}, Replicas: []string{"r0", "r1"}, Units: []Unit{unit}, Faults: []Fault{replicaKill}}
	r := Check(h, Options{})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.TimedOutAutomator != 1 {
		t.Errorf("timed out because a replica crashed: %d, want 1", r.TimedOutAutomator)
	}

	h.Faults = nil
	h.Units[0].SeenAt = at(60.1)
	mustBreak(t, h, RuleExplained)

	h.Faults = []Fault{replicaKill}
	h.Units[0].FinishedAt, h.Units[0].SeenAt = at(63), at(63.1) // the other replica's sweeper was up
	mustBreak(t, h, RuleDeadline)
}

// TestCheckerHoldsCallersOfAHungReplicaToTheDeadline: a caller waiting on
// a replica that hangs (SIGSTOP, or cut off from PostgreSQL) must still
// learn of its unit's end by the deadline: its client gives the replica up
// and asks another. Seen 10 s after the deadline with only a hung replica
// to blame breaks the deadline, whatever the unit's end; a replica's crash
// at the same time would excuse it (the caller learns once it has moved
// on), and so does a submit answered only after the deadline.
func TestCheckerHoldsCallersOfAHungReplicaToTheDeadline(t *testing.T) {
	for _, state := range []string{StateSucceeded, StateTimedOut} {
		u := Unit{Key: "k-h1", WorkID: "h1", Expect: ExpectOutput, WantStdout: "x\n", WantExit: 0, SubmittedAt: at(50), AckedAt: at(50.01), QueuedAt: at(50),
			Deadline: at(60), ClaimedAt: at(50.1), FinishedAt: at(50.3), Seen: true, SeenAt: at(70), State: state, Claimer: "a", FinalState: state}
		es := []Exec{{WorkID: "h1", Instance: "a", Start: at(50.15), End: at(50.25)}}
		if state == StateSucceeded {
			u.HasResult, u.ResultInstance, u.Stdout = true, "a", "x\n"
		} else {
			u.FinishedAt = at(60.1)
			es = nil
		}
		for _, kind := range []string{"replica-pause", "replica-pg-partition"} {
			h := History{Instances: []string{"a", "b"}, Replicas: []string{"r0", "r1"}, Units: []Unit{u}, Execs: es,
				Faults: []Fault{{Kind: kind, Targets: []string{"r0"}, Start: at(50.2), End: at(69.5)}}}
			mustBreak(t, h, RuleDeadline)

			h.Faults[0].Kind = "replica-kill"
			if err := Check(h, Options{}).Err(); err != nil {
				t.Errorf("%s, a replica killed instead of %s: %v", state, kind, err)
			}
			h.Faults[0].Kind = kind
			h.Units[0].AckedAt = at(69)
			if err := Check(h, Options{}).Err(); err != nil {
				t.Errorf("%s, %s, submit answered at 69s: %v", state, kind, err)
			}
		}
	}
}

// TestCheckerChecksWhatCallersMadeOfCutAnswers: the unit a cut Submit
// answer named must be the one its caller got (a second unit would mean
// the repeated submit did not find the first), and a caller whose Wait
// answer was cut must learn the end that answer carried.
func TestCheckerChecksWhatCallersMadeOfCutAnswers(t *testing.T) {
	h := cleanHistory()
	h.Faults = append(h.Faults,
		Fault{Kind: "caller-cut-submit", Targets: []string{Callers}, Start: at(0.05), End: at(0.05), WorkIDs: []string{"w1"}, State: "queued"},
		Fault{Kind: "caller-cut-wait", Targets: []string{Callers}, Start: at(0.25), End: at(0.25), WorkIDs: []string{"w2"}, State: StateSucceeded})
	if err := Check(h, Options{}).Err(); err != nil {
		t.Fatal(err)
	}
	bad := h
	bad.Faults = append(slices.Clone(h.Faults[:len(h.Faults)-2]),
		Fault{Kind: "caller-cut-submit", Targets: []string{Callers}, Start: at(0.05), End: at(0.05), WorkIDs: []string{"w-other"}, State: "queued"})
	mustBreak(t, bad, RuleAtMostOnce)
	bad.Faults = append(slices.Clone(h.Faults[:len(h.Faults)-2]),
		Fault{Kind: "caller-cut-wait", Targets: []string{Callers}, Start: at(0.25), End: at(0.25), WorkIDs: []string{"w2"}, State: StateTimedOut})
	mustBreak(t, bad, RuleOneTerminal)
}

// TestCheckerLetsAUnitHeldByAHungReplicaEndWhenItIsAcknowledged: a replica
// that stops while it stores a unit holds the unit back from the database
// and its caller's submit unanswered; once it resumes, past the deadline,
// it stores the unit and times it out at once. The unit may end then (2 s
// after its submit was answered), not at its deadline; without a hung
// replica, or with the submit answered before the deadline, the same end
// is late.
func TestCheckerLetsAUnitHeldByAHungReplicaEndWhenItIsAcknowledged(t *testing.T) {
	u := Unit{Key: "k-h2", WorkID: "h2", Expect: ExpectOutput, WantStdout: "x", SubmittedAt: at(50), AckedAt: at(79.1), QueuedAt: at(50),
		Deadline: at(60), ClaimedAt: at(51.9), FinishedAt: at(79.2), Seen: true, SeenAt: at(79.3), State: StateTimedOut, Claimer: "a", FinalState: StateTimedOut}
	pause := Fault{Kind: "replica-pause", Targets: []string{"r0"}, Start: at(52), End: at(79)}
	h := History{Instances: []string{"a", "b"}, Replicas: []string{"r0", "r1"}, Units: []Unit{u}, Faults: []Fault{pause}}
	if err := Check(h, Options{}).Err(); err != nil {
		t.Fatal(err)
	}
	h.Faults = []Fault{{Kind: "proxy-pause", Targets: []string{"a"}, Start: at(52), End: at(79)}}
	mustBreak(t, h, RuleDeadline)
	h.Faults = []Fault{pause}
	h.Units[0].AckedAt = at(50.1)
	mustBreak(t, h, RuleDeadline)
}

// TestCheckerExplainsAClaimNeverDelivered: a unit the automator failed
// because its claim never reached its claimer (the proxy said its poll's
// answer was lost) passes when a fault hit that claimer's connection, is
// counted apart, and breaks "a timeout has a cause" when nothing did; it
// may not have run.
func TestCheckerExplainsAClaimNeverDelivered(t *testing.T) {
	undelivered := func() History {
		h := cleanHistory()
		h.Units = append(h.Units, Unit{Key: "k-w8", WorkID: "w8", Expect: ExpectOutput, WantStdout: "x", SubmittedAt: at(60), QueuedAt: at(60), Deadline: at(70),
			ClaimedAt: at(60), FinishedAt: at(64), Seen: true, SeenAt: at(64.01), State: StateFailed, Claimer: "a", FinalState: StateFailed,
			Reason: "its claim never reached instance a: the answer of the poll it was claimed for never reached the proxy" + UndeliveredReason})
		return h
	}
	h := undelivered()
	h.Faults = append(h.Faults, Fault{Kind: "net-idle-cut", Targets: []string{"a"}, Start: at(59.5), End: at(59.5)})
	r := Check(h, Options{})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Failed != 2 || r.FailedUndelivered != 1 {
		t.Errorf("failed %d, of which never delivered %d; want 2, 1", r.Failed, r.FailedUndelivered)
	}
	if !strings.Contains(r.Table(), "its claim never reached its claimer (lost with its connection; the script did not run) | 1 |") {
		t.Errorf("the table does not count the unit never delivered:\n%s", r.Table())
	}

	mustBreak(t, undelivered(), RuleExplained)

	h = undelivered()
	h.Faults = append(h.Faults, Fault{Kind: "net-idle-cut", Targets: []string{"a"}, Start: at(59.5), End: at(59.5)})
	h.Execs = append(h.Execs, Exec{WorkID: "w8", Instance: "a", Start: at(61), End: at(62)})
	mustBreak(t, h, RuleOutput)
}
