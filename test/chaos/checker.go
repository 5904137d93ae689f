package chaos

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Terminal states as callers see them.
const (
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateTimedOut  = "timed_out"
	StateCancelled = "cancelled"
	// StateNotFound is a FinalState: the automator does not know the unit.
	StateNotFound = "not_found"
)

func terminal(s string) bool {
	return s == StateSucceeded || s == StateFailed || s == StateTimedOut || s == StateCancelled
}

// Rules the checker enforces, in the words of the guarantees.
const (
	RuleAtMostOnce   = "at most once"                      // guarantee 1
	RuleAlwaysEnds   = "always ends"                       // guarantee 2
	RuleOneTerminal  = "exactly one terminal state"        // guarantee 2
	RuleDeadline     = "timed out at its deadline"         // guarantees 2, 6
	RuleDurable      = "nothing lost"                      // guarantee 3
	RuleSurvivors    = "unclaimed work picked up"          // guarantee 4
	RuleExplained    = "a timeout has a cause"             // guarantees 1-5 (and so has a claim never delivered)
	RuleOutput       = "output matches input"              // end to end
	RuleEnforcesLate = "nothing reported after a deadline" // guarantee 7
)

// NotFaulted lists fault kinds that cannot lose a claim or a result, so
// they never explain a timeout: a unit that times out during them alone is
// a violation.
var NotFaulted = map[string]bool{"net-latency": true, "caller-net-drop": true, "caller-cut-wait": true, "caller-cut-submit": true}

// HangsReplica lists fault kinds that leave a replica up but hung for its
// callers (SIGSTOPped; or cut off from PostgreSQL, so calls that need the
// database do not answer). Unlike a replica's crash they do not excuse a
// caller learning of an end late: its client must give up the hung replica
// and learn the end from another, by the deadline.
var HangsReplica = map[string]bool{"replica-pause": true, "replica-pg-partition": true}

// KillsInstances lists fault kinds that SIGKILL the instances they target.
var KillsInstances = map[string]bool{"proxy-kill": true, "proxy-kill-pair": true, "proxy-kill-group": true, "standby-failover": true}

// stallKind marks a machine stall among the faults the checker considers.
const stallKind = "machine-stall"

// Options tune the checker's tolerances.
type Options struct {
	// Late is how long after its deadline a unit may end timed_out, or its
	// caller learn it, while the automator is up (2s).
	Late time.Duration
	// Margin widens every fault's interval on both sides when it explains
	// a timeout, for the time between a decision and its effect (1s).
	Margin time.Duration
	// Recovery is how long after a fault ends its targets still count as
	// recovering: reconnecting with backoff, restarting (10s).
	Recovery time.Duration
	// Pickup is the healthy time (automator up and some instance neither
	// faulted nor idle) within a unit's life after which a unit nobody
	// claimed is a violation: the survivors should have picked it up (3s).
	Pickup time.Duration
}

func (o *Options) defaults() {
	if o.Late <= 0 {
		o.Late = 2 * time.Second
	}
	if o.Margin <= 0 {
		o.Margin = time.Second
	}
	if o.Recovery <= 0 {
		o.Recovery = 10 * time.Second
	}
	if o.Pickup <= 0 {
		o.Pickup = 3 * time.Second
	}
}

// Violation is one broken guarantee.
type Violation struct {
	Rule   string
	WorkID string // or the idempotency key of a unit never acknowledged
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("[%s] %s: %s", v.Rule, v.WorkID, v.Detail) }

// Report is the checker's verdict on a history.
type Report struct {
	Units, Succeeded, Failed, TimedOut, Cancelled int
	// ExecutedTwice counts units whose script ran more than once.
	ExecutedTwice int
	// Lost counts acknowledged units whose caller never saw them end, or
	// that the automator no longer knows.
	Lost       int
	Executions int
	// Timeout causes: the script ran past its deadline on purpose; the
	// claimer was faulted (killed, paused, partitioned, its connection cut);
	// the automator crashed while the unit was claimed; nothing healthy
	// could claim it in time.
	TimedOutExpected, TimedOutClaimerFault, TimedOutAutomator, TimedOutUnclaimed int
	// FailedUndelivered counts units failed because their claim never
	// reached their claimer (its poll's answer was lost with its
	// connection), each explained by a fault like a timeout.
	FailedUndelivered int
	// AcrossRestart counts units alive while the automator was down;
	// AcrossRestartSucceeded those of them that succeeded.
	AcrossRestart, AcrossRestartSucceeded int
	// PickedUpBySurvivors counts units queued while some instance was
	// down (SIGKILLed, not yet back) that another instance ran.
	PickedUpBySurvivors int
	// SpooledAcrossRestart counts units whose claimer was killed after the
	// script ended and before the result was accepted, and that succeeded
	// (the result came from the spool of the restarted instance).
	SpooledAcrossRestart int
	// MaxLate is the latest a timeout ended after its deadline, among
	// deadlines that did not fall in an automator outage.
	MaxLate time.Duration
	// Latency of succeeded units, submit to seen.
	LatencyP50, LatencyP99 time.Duration
	// SlowestSubmit is the longest a caller waited for its Submit to be
	// acknowledged, retries included.
	SlowestSubmit time.Duration
	FaultsByKind  map[string]int
	// Stalls counts the times the test machine stood still (not injected),
	// MaxStall the longest.
	Stalls     int
	MaxStall   time.Duration
	Violations []Violation
}

// Err is nil when every guarantee held, and otherwise says loudly which
// broke, how often, with examples.
func (r Report) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	byRule := map[string][]Violation{}
	var rules []string
	for _, v := range r.Violations {
		if byRule[v.Rule] == nil {
			rules = append(rules, v.Rule)
		}
		byRule[v.Rule] = append(byRule[v.Rule], v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GUARANTEES BROKEN: %d violations (executed twice: %d, lost: %d)", len(r.Violations), r.ExecutedTwice, r.Lost)
	for _, rule := range rules {
		vs := byRule[rule]
		fmt.Fprintf(&b, "\n  %q broken %d times, e.g.:", rule, len(vs))
		for _, v := range vs[:min(len(vs), 5)] {
			fmt.Fprintf(&b, "\n    %s: %s", v.WorkID, v.Detail)
		}
	}
	return errors.New(b.String())
}

// Check checks a history against the guarantees.
func Check(h History, o Options) Report {
	o.defaults()
	c := &checker{h: h, o: o, execs: map[string][]Exec{}}
	c.r.FaultsByKind = map[string]int{}
	for _, f := range h.Faults {
		c.r.FaultsByKind[f.Kind]++
	}
	// A machine stall freezes every process: the automator and every
	// instance, as if all were faulted at once.
	c.h.Faults = slices.Clone(h.Faults)
	for _, s := range h.Stalls {
		c.r.Stalls++
		c.r.MaxStall = max(c.r.MaxStall, s.End.Sub(s.Start))
		c.h.Faults = append(c.h.Faults, Fault{Kind: stallKind, Targets: append([]string{Automator}, h.Instances...), Start: s.Start, End: s.End})
	}
	for _, f := range c.h.Faults {
		if slices.Contains(f.Targets, Automator) {
			c.outages = append(c.outages, f)
		}
	}
	sort.Slice(c.outages, func(i, j int) bool { return c.outages[i].Start.Before(c.outages[j].Start) })
	for _, e := range h.Execs {
		c.execs[e.WorkID] = append(c.execs[e.WorkID], e)
	}
	c.r.Executions = len(h.Execs)
	known := map[string]bool{}
	var latencies []time.Duration
	for i := range h.Units {
		u := &h.Units[i]
		c.r.Units++
		if u.WorkID == "" {
			c.fail(RuleAlwaysEnds, u.Key, "Submit was never acknowledged: %s", u.SubmitErr)
			continue
		}
		if known[u.WorkID] {
			c.fail(RuleAtMostOnce, u.WorkID, "two callers' submits (different idempotency keys) got the same work id")
		}
		known[u.WorkID] = true
		if !u.AckedAt.IsZero() {
			c.r.SlowestSubmit = max(c.r.SlowestSubmit, u.AckedAt.Sub(u.SubmittedAt))
		}
		c.unit(u)
		if u.State == StateSucceeded && u.Seen {
			latencies = append(latencies, u.SeenAt.Sub(u.SubmittedAt))
		}
	}
	for id, es := range c.execs {
		if !known[id] {
			c.fail(RuleAtMostOnce, id, "executed on %s although no caller submitted it", es[0].Instance)
		}
	}
	c.callerCuts(known)
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		c.r.LatencyP50 = latencies[n/2]
		c.r.LatencyP99 = latencies[min(n-1, n*99/100)]
	}
	return c.r
}

type checker struct {
	h       History
	o       Options
	r       Report
	execs   map[string][]Exec
	outages []Fault // of the automator, by start
}

func (c *checker) fail(rule, id, format string, args ...any) {
	c.r.Violations = append(c.r.Violations, Violation{Rule: rule, WorkID: id, Detail: fmt.Sprintf(format, args...)})
}

func (c *checker) unit(u *Unit) {
	id := u.WorkID
	es := c.execs[id]
	if len(es) > 1 {
		c.r.ExecutedTwice++
		var where []string
		for _, e := range es {
			where = append(where, fmt.Sprintf("%s at %s", e.Instance, e.Start.Format("15:04:05.000")))
		}
		c.fail(RuleAtMostOnce, id, "executed %d times: %s", len(es), strings.Join(where, ", "))
	}
	for _, e := range es {
		// A caller that never saw the end knows no claimer (the unit is
		// lost, below).
		if u.Seen && e.Instance != u.Claimer {
			c.fail(RuleAtMostOnce, id, "executed on %s, but claimed by %q", e.Instance, u.Claimer)
		}
	}

	if !u.Seen || !terminal(u.State) {
		c.r.Lost++
		c.fail(RuleDurable, id, "acknowledged at %s, but the caller never saw it end (last state %q, last Wait error %q)",
			u.SubmittedAt.Format("15:04:05.000"), u.State, u.WaitErr)
		return
	}
	if u.FinalState == StateNotFound {
		c.r.Lost++
		c.fail(RuleDurable, id, "the caller saw it %s, but the automator no longer knows it", u.State)
		return
	}
	if u.FinalState != "" && u.FinalState != u.State {
		c.fail(RuleOneTerminal, id, "the caller saw %s, a later Get says %s", u.State, u.FinalState)
	}
	if c.outageDuring(u.QueuedAt, u.SeenAt) {
		c.r.AcrossRestart++
		if u.State == StateSucceeded {
			c.r.AcrossRestartSucceeded++
		}
	}

	if u.State != StateTimedOut {
		c.seenInTime(u)
	}
	switch u.State {
	case StateSucceeded:
		c.r.Succeeded++
		c.succeeded(u, es)
	case StateFailed:
		c.r.Failed++
		if len(es) > 0 {
			c.fail(RuleOutput, id, "failed, but its script ran on %s", es[0].Instance)
		}
		switch {
		case strings.HasSuffix(u.Reason, UndeliveredReason):
			c.r.FailedUndelivered++
			c.undelivered(u)
		case u.Expect != ExpectFailed:
			c.fail(RuleOutput, id, "failed (%s), expected %s", u.Reason, u.Expect)
		}
		c.beforeDeadline(u)
	case StateTimedOut:
		c.r.TimedOut++
		c.timedOut(u, es)
	case StateCancelled:
		c.r.Cancelled++
		c.fail(RuleOutput, id, "cancelled, but no caller cancels in this run: %s", u.Reason)
	}
}

func (c *checker) succeeded(u *Unit, es []Exec) {
	id := u.WorkID
	c.beforeDeadline(u)
	for _, f := range c.h.Faults {
		if KillsInstances[f.Kind] && !u.QueuedAt.Before(f.Start) && u.QueuedAt.Before(f.End) && !slices.Contains(f.Targets, u.Claimer) {
			c.r.PickedUpBySurvivors++
			break
		}
	}
	if u.Expect != ExpectOutput {
		rule := RuleOutput
		if u.Expect == ExpectTimedOut {
			rule = RuleEnforcesLate
		}
		c.fail(rule, id, "succeeded, expected %s", u.Expect)
		return
	}
	if !u.HasResult || u.Stdout != u.WantStdout || u.ExitCode != u.WantExit {
		c.fail(RuleOutput, id, "result exit %d stdout %q, want exit %d stdout %q", u.ExitCode, u.Stdout, u.WantExit, u.WantStdout)
	}
	if u.ResultInstance != u.Claimer {
		c.fail(RuleOutput, id, "result sealed by %q, but claimed by %q", u.ResultInstance, u.Claimer)
	}
	if len(es) == 0 {
		c.fail(RuleOutput, id, "succeeded, but the execution log has no run of it")
		return
	}
	e := es[0]
	if e.Start.Before(u.ClaimedAt.Add(-c.o.Margin)) {
		c.fail(RuleAtMostOnce, id, "its script started at %s, before the claim at %s", e.Start.Format("15:04:05.000"), u.ClaimedAt.Format("15:04:05.000"))
	}
	if e.End.IsZero() {
		return
	}
	for _, f := range c.h.Faults {
		if KillsInstances[f.Kind] && slices.Contains(f.Targets, u.Claimer) && !f.Start.Before(e.End) && f.Start.Before(u.FinishedAt) {
			c.r.SpooledAcrossRestart++
			break
		}
	}
}

// callerCuts checks what the callers made of the answers cut on their way
// to them: a cut Submit answer's unit is the one its caller got when it
// submitted again with the same key (not a second unit), and a caller
// whose Wait answer was cut learnt the end that answer carried.
func (c *checker) callerCuts(known map[string]bool) {
	seen := map[string]*Unit{}
	for i := range c.h.Units {
		if u := &c.h.Units[i]; u.WorkID != "" {
			seen[u.WorkID] = u
		}
	}
	for _, f := range c.h.Faults {
		if !slices.Contains(f.Targets, Callers) {
			continue
		}
		for _, id := range f.WorkIDs {
			if !known[id] {
				c.fail(RuleAtMostOnce, id, "%s at %s: the cut answer named this unit, but no caller holds it: the repeated submit made another", f.Kind, f.Start.Format("15:04:05.000"))
				continue
			}
			if u := seen[id]; terminal(f.State) && u.Seen && u.State != f.State {
				c.fail(RuleOneTerminal, id, "%s at %s: the cut answer said %s, the caller then learnt %s", f.Kind, f.Start.Format("15:04:05.000"), f.State, u.State)
			}
		}
	}
}

// seenInTime: the caller learns of the end by the deadline (Late after the
// latest the unit may end, and Late again for the answer to reach it),
// unless the automator was down then or a replica crashed (it learns once
// its client has moved on); or, when its submit was answered only after
// that, Late after the answer.
func (c *checker) seenInTime(u *Unit) {
	latest, _ := c.latestEnd(u.Deadline)
	bound := c.latestSeen(latest).Add(c.o.Late)
	if acked := u.AckedAt.Add(c.o.Late); acked.After(bound) {
		bound = acked
	}
	if u.SeenAt.After(bound) {
		c.fail(RuleDeadline, u.WorkID, "the caller learnt it %s %v after its deadline (allowed %v)", u.State, u.SeenAt.Sub(u.Deadline), bound.Sub(u.Deadline))
	}
}

// beforeDeadline: a result is accepted only before the deadline.
func (c *checker) beforeDeadline(u *Unit) {
	if u.FinishedAt.After(u.Deadline) {
		c.fail(RuleEnforcesLate, u.WorkID, "ended %s at %s, %v after its deadline", u.State,
			u.FinishedAt.Format("15:04:05.000"), u.FinishedAt.Sub(u.Deadline))
	}
}

func (c *checker) timedOut(u *Unit, es []Exec) {
	id := u.WorkID
	// Not before the deadline, not much after (unless the automator was
	// down then: it ends the unit when it is back).
	if u.FinishedAt.Before(u.Deadline) {
		c.fail(RuleDeadline, id, "timed out at %s, %v before its deadline", u.FinishedAt.Format("15:04:05.000"), u.Deadline.Sub(u.FinishedAt))
	}
	if u.SeenAt.Before(u.Deadline) {
		c.fail(RuleDeadline, id, "the caller saw the timeout %v before the deadline", u.Deadline.Sub(u.SeenAt))
	}
	latest, outage := c.latestEnd(u.Deadline)
	if held := c.heldBack(u); held.After(latest) {
		latest, outage = held, true
	}
	if u.FinishedAt.After(latest) {
		c.fail(RuleDeadline, id, "timed out %v after its deadline (allowed %v)", u.FinishedAt.Sub(u.Deadline), latest.Sub(u.Deadline))
	}
	seen := c.latestSeen(latest).Add(c.o.Late)
	if acked := u.AckedAt.Add(c.o.Late); acked.After(seen) {
		seen = acked
	}
	if u.SeenAt.After(seen) {
		c.fail(RuleDeadline, id, "the caller saw the timeout %v after its deadline (allowed %v)", u.SeenAt.Sub(u.Deadline), seen.Sub(u.Deadline))
	}
	if !outage {
		c.r.MaxLate = max(c.r.MaxLate, u.FinishedAt.Sub(u.Deadline))
	}

	switch {
	case u.Expect == ExpectTimedOut:
		c.r.TimedOutExpected++
		// Guarantee 7: the proxy killed the script at the deadline, so it
		// never reached its end, unless its proxy died first.
		for _, e := range es {
			if !e.End.IsZero() && e.End.After(u.Deadline.Add(c.o.Late)) && !c.faulted(e.Instance, u.ClaimedAt, u.Deadline, true) {
				c.fail(RuleEnforcesLate, id, "its script ran on to %s, %v past the deadline, on a healthy %s", e.End.Format("15:04:05.000"), e.End.Sub(u.Deadline), e.Instance)
			}
		}
	case u.Claimer == "":
		if healthy := c.healthyTime(u.QueuedAt, u.Deadline); healthy >= c.o.Pickup {
			c.fail(RuleSurvivors, id, "never claimed in %v, although the automator and some instance were healthy for %v of it", u.Deadline.Sub(u.QueuedAt), healthy)
		} else {
			c.r.TimedOutUnclaimed++
		}
	case c.cutConcerns(id) || c.faulted(u.Claimer, u.ClaimedAt, u.Deadline, false):
		c.r.TimedOutClaimerFault++
	case c.faulted(Automator, u.ClaimedAt, u.Deadline, false) || c.replicaFaulted(u.ClaimedAt, u.Deadline):
		c.r.TimedOutAutomator++
	default:
		ran := "its script never ran"
		if len(es) > 0 {
			ran = fmt.Sprintf("its script ran on %s from %s to %s", es[0].Instance, es[0].Start.Format("15:04:05.000"), es[0].End.Format("15:04:05.000"))
		}
		c.fail(RuleExplained, id, "claimed by %s at %s and timed out at %s although neither %s nor the automator was faulted; %s",
			u.Claimer, u.ClaimedAt.Format("15:04:05.000"), u.FinishedAt.Format("15:04:05.000"), u.Claimer, ran)
	}
}

// UndeliveredReason ends the reason of a unit the automator failed because
// its claim never reached its claimer: the poll's answer that carried it
// was lost (the proxy said so in its next poll, or the poll had ended).
const UndeliveredReason = "; the script did not run"

// undelivered: a claim is lost on its way only with its claimer's
// connection, so a fault must explain it, as it must a timeout.
func (c *checker) undelivered(u *Unit) {
	if c.cutConcerns(u.WorkID) || c.faulted(u.Claimer, u.ClaimedAt, u.FinishedAt, true) || c.replicaFaulted(u.ClaimedAt, u.FinishedAt) {
		return
	}
	c.fail(RuleExplained, u.WorkID, "claimed by %s at %s and failed at %s as never delivered (%s), although neither %s nor the automator was faulted",
		u.Claimer, u.ClaimedAt.Format("15:04:05.000"), u.FinishedAt.Format("15:04:05.000"), u.Reason, u.Claimer)
}

// latestEnd is the latest a unit with this deadline may time out: Late
// after it, or Late after the automator came back from an outage that
// began by then.
func (c *checker) latestEnd(deadline time.Time) (time.Time, bool) {
	latest, outage := deadline.Add(c.o.Late), false
	for _, f := range c.outages {
		end := f.End
		if end.IsZero() {
			end = f.Start
		}
		if !f.Start.After(latest) && !end.Before(deadline.Add(-c.o.Margin)) {
			latest, outage = maxTime(latest, end.Add(c.o.Late)), true
		}
	}
	return latest, outage
}

// heldBack is the latest a unit may end when a hung replica held it back:
// a replica that stops (or loses the database) while it stores a unit holds
// the unit back from the database, where no other replica's sweeper sees
// it, and its caller's submit unanswered; once the replica resumes, past
// the deadline, it stores the unit and times it out at once. So a unit
// whose submit was answered after its deadline, while a replica hung
// between its queueing and its deadline, may end until Late after that
// answer. Zero otherwise.
func (c *checker) heldBack(u *Unit) time.Time {
	if !u.AckedAt.After(u.Deadline) {
		return time.Time{}
	}
	from, to := u.QueuedAt.Add(-c.o.Margin), u.Deadline
	for _, f := range c.h.Faults {
		if HangsReplica[f.Kind] && !f.Start.After(to) && !maxTime(f.Start, f.End).Before(from) {
			return u.AckedAt.Add(c.o.Late)
		}
	}
	return time.Time{}
}

// latestSeen is the latest a caller may learn of an end due by latest: a
// replica's crash or reset that began by then delays it until the fault is
// over (the caller waits again on another replica, or on the same one
// restarted). A hung replica (HangsReplica) delays nothing.
func (c *checker) latestSeen(latest time.Time) time.Time {
	seen := latest
	for _, f := range c.h.Faults {
		if !c.hitsReplica(f) || HangsReplica[f.Kind] || f.Start.After(latest) {
			continue
		}
		if end := maxTime(f.Start, f.End).Add(c.o.Margin); end.After(latest.Add(-c.o.Late)) {
			seen = maxTime(seen, end)
		}
	}
	return seen
}

// hitsReplica: f targets one of the automator's replicas.
func (c *checker) hitsReplica(f Fault) bool {
	for _, r := range c.h.Replicas {
		if slices.Contains(f.Targets, r) {
			return true
		}
	}
	return false
}

// replicaFaulted: a fault hit one of the replicas within [from, to].
func (c *checker) replicaFaulted(from, to time.Time) bool {
	for _, r := range c.h.Replicas {
		if c.faulted(r, from, to, false) {
			return true
		}
	}
	return false
}

func (c *checker) outageDuring(from, to time.Time) bool {
	for _, f := range c.outages {
		if f.Start.Before(to) && !f.End.Before(from) {
			return true
		}
	}
	return false
}

// cutConcerns: a connection cut named this unit.
func (c *checker) cutConcerns(id string) bool {
	for _, f := range c.h.Faults {
		if slices.Contains(f.WorkIDs, id) {
			return true
		}
	}
	return false
}

// faulted reports whether a fault that can lose work hit who (or the
// automator, for an instance, when withAutomator) within [from, to],
// widened by the margin and each fault's recovery.
func (c *checker) faulted(who string, from, to time.Time, withAutomator bool) bool {
	from, to = from.Add(-c.o.Margin), to.Add(c.o.Margin)
	for _, f := range c.h.Faults {
		if NotFaulted[f.Kind] {
			continue
		}
		if !slices.Contains(f.Targets, who) && !(withAutomator && slices.Contains(f.Targets, Automator)) {
			continue
		}
		end := maxTime(f.Start, f.End).Add(c.o.Recovery)
		if !f.Start.After(to) && !end.Before(from) {
			return true
		}
	}
	return false
}

// healthyTime measures the time within [from, to] when the automator was
// up and at least one instance was neither faulted nor idle, taking each
// fault's recovery into account.
func (c *checker) healthyTime(from, to time.Time) time.Duration {
	type span struct {
		who        string
		start, end time.Time
	}
	var down []span
	for _, f := range c.h.Faults {
		if NotFaulted[f.Kind] {
			continue
		}
		for _, who := range f.Targets {
			down = append(down, span{who, f.Start, maxTime(f.Start, f.End).Add(c.o.Recovery)})
		}
	}
	for _, iv := range c.h.Idle {
		end := iv.End
		if end.IsZero() {
			end = to
		}
		down = append(down, span{iv.Who, iv.Start, end})
	}
	points := []time.Time{from, to}
	for _, s := range down {
		for _, t := range []time.Time{s.start, s.end} {
			if t.After(from) && t.Before(to) {
				points = append(points, t)
			}
		}
	}
	slices.SortFunc(points, func(a, b time.Time) int { return a.Compare(b) })
	isDown := func(who string, t time.Time) bool {
		for _, s := range down {
			if s.who == who && !t.Before(s.start) && t.Before(s.end) {
				return true
			}
		}
		return false
	}
	var healthy time.Duration
	for i := 0; i+1 < len(points); i++ {
		a, b := points[i], points[i+1]
		if !a.Before(b) {
			continue
		}
		mid := a.Add(b.Sub(a) / 2)
		if isDown(Automator, mid) {
			continue
		}
		for _, in := range c.h.Instances {
			if !isDown(in, mid) {
				healthy += b.Sub(a)
				break
			}
		}
	}
	return healthy
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
