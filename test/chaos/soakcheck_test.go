//go:build linux

package chaos

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// soakCheck is what the soak's load saw, checked against the guarantees:
// whatever the disturbances, a unit runs at most once and on its claimer,
// ends, times out at its deadline, and ends as its kind says unless a
// disturbance of its claimer explains otherwise (a claim lost with a reset
// connection fails, "the script did not run"; the units of a crashed or
// stopped proxy time out or fail). Caller errors that are not an outage to
// retry fail the soak too.
type soakCheck struct {
	Units      int
	ByKind     [soakKinds]soakKindCount
	ByState    map[string]int
	Executions int
	// MaxLate is the latest a unit ended timed_out after its deadline,
	// on the automator's clock.
	MaxLate time.Duration
	// Stalls counts the times the machine stood still (not injected),
	// MaxStall the longest.
	Stalls       int
	MaxStall     time.Duration
	CallerErrors []string
	Violations   []Violation
}

type soakKindCount struct{ Units, AsExpected, Disturbed, Unexpected int }

// soakLate is how long after its deadline a unit may end timed_out (on the
// automator's clock), and soakSeenLate how long after it its caller may
// learn of it, with no reset of the callers' connection in between.
const (
	soakLate     = 2 * time.Second
	soakSeenLate = 3 * time.Second
	// soakRecovery is how long after a disturbance its target may still
	// lose units: reconnecting, restarting.
	soakRecovery = 5 * time.Second
	// soakKillCheck is how long after a script's start its end would have
	// been logged had it not been killed (it sleeps 30 s).
	soakKillCheck = 35 * time.Second
)

func (c *soakCheck) fail(rule, id, format string, args ...any) {
	c.Violations = append(c.Violations, Violation{Rule: rule, WorkID: id, Detail: fmt.Sprintf(format, args...)})
}

// checkSoak checks the units the callers saw against the execution log and
// the disturbances; execs were read at readAt.
func checkSoak(units []soakUnit, execs []Exec, events []soakEvent, readAt time.Time) soakCheck {
	c := soakCheck{ByState: map[string]int{}, Executions: len(execs)}
	for _, e := range events {
		if e.Target == Machine {
			c.Stalls++
			c.MaxStall = max(c.MaxStall, e.End.Sub(e.Start))
		}
	}
	byID := map[string][]Exec{}
	for _, e := range execs {
		byID[e.WorkID] = append(byID[e.WorkID], e)
	}
	known := map[string]bool{}
	for i := range units {
		u := &units[i]
		c.Units++
		c.ByKind[u.Kind].Units++
		if u.WorkID != "" {
			known[u.WorkID] = true
		}
		if u.Err != "" {
			c.CallerErrors = append(c.CallerErrors, fmt.Sprintf("%s (%s): %s", u.Key, u.Kind, u.Err))
			c.ByKind[u.Kind].Unexpected++
			continue
		}
		c.ByState[u.State]++
		es := byID[u.WorkID]
		if len(es) > 1 {
			c.fail(RuleAtMostOnce, u.WorkID, "%s: executed %d times", u.Kind, len(es))
		}
		for _, e := range es {
			if e.Instance != u.Claimer {
				c.fail(RuleAtMostOnce, u.WorkID, "%s: executed on %s, but claimed by %q", u.Kind, e.Instance, u.Claimer)
			}
		}
		c.timing(u, events)
		why := expected(u, es, readAt)
		switch {
		case why == "":
			c.ByKind[u.Kind].AsExpected++
		case (u.State == StateFailed || u.State == StateTimedOut) && disturbed(u, events):
			c.ByKind[u.Kind].Disturbed++
			if len(es) > 0 && strings.HasSuffix(u.Reason, UndeliveredReason) {
				c.fail(RuleOutput, u.WorkID, "%s: failed as never delivered (%s), but its script ran on %s", u.Kind, u.Reason, es[0].Instance)
			}
		default:
			c.ByKind[u.Kind].Unexpected++
			c.fail(RuleOutput, u.WorkID, "%s on %q: %s (state %s, reason %q)", u.Kind, u.Claimer, why, u.State, u.Reason)
		}
	}
	if len(c.CallerErrors) == 0 {
		for id, es := range byID {
			if !known[id] {
				c.fail(RuleAtMostOnce, id, "executed on %s although no caller submitted it", es[0].Instance)
			}
		}
	}
	return c
}

// timing checks the deadline of a unit's end: a timeout at it (not
// before, at most soakLate after), a result before it, and the caller
// told of a timeout soon after it, unless its connection was reset
// meanwhile.
func (c *soakCheck) timing(u *soakUnit, events []soakEvent) {
	switch u.State {
	case StateTimedOut:
		// Time the machine stood still after the deadline is no one's
		// lateness: nothing ran then.
		late := u.FinishedAt.Sub(u.Deadline)
		still := stoodStill(events, u.Deadline, u.FinishedAt)
		if still == 0 {
			c.MaxLate = max(c.MaxLate, late)
		}
		if late < 0 {
			c.fail(RuleDeadline, u.WorkID, "%s: timed out %v before its deadline", u.Kind, -late)
		} else if late-still > soakLate {
			c.fail(RuleDeadline, u.WorkID, "%s: timed out %v after its deadline%s", u.Kind, late, stillFor(still))
		}
		seen := u.SeenAt.Sub(u.Deadline)
		seenStill := stoodStill(events, u.Deadline, u.SeenAt)
		if seen-seenStill > soakSeenLate && !callersReset(events, u.Deadline.Add(-time.Second), u.SeenAt) {
			c.fail(RuleDeadline, u.WorkID, "%s: its caller learnt of its timeout %v after its deadline%s", u.Kind, seen.Round(time.Millisecond), stillFor(seenStill))
		}
	case StateSucceeded:
		if u.FinishedAt.After(u.Deadline) {
			c.fail(RuleEnforcesLate, u.WorkID, "%s: its result was taken %v after its deadline", u.Kind, u.FinishedAt.Sub(u.Deadline))
		}
	}
}

// expected says how a unit did not end as its kind should; "" when it did.
func expected(u *soakUnit, es []Exec, readAt time.Time) string {
	want := func(state string) string {
		if u.State != state {
			return "ended " + u.State + ", want " + state
		}
		return ""
	}
	killed := func() string {
		for _, e := range es {
			if !e.End.IsZero() {
				return fmt.Sprintf("its script ran to its end on %s (%v) although the unit ended %s", e.Instance, e.End.Sub(e.Start).Round(time.Millisecond), u.State)
			}
			if readAt.Sub(e.Start) < soakKillCheck {
				return "" // too recent to know
			}
		}
		return ""
	}
	switch u.Kind {
	case soakPing, soakRepeat:
		if w := want(StateSucceeded); w != "" {
			return w
		}
		if !u.HasResult || !strings.HasPrefix(u.Stdout, "instance_id="+u.Claimer+"\n") || u.ResultInstance != u.Claimer {
			return fmt.Sprintf("result of %q with stdout %q, want @ping's of its claimer", u.ResultInstance, u.Stdout)
		}
	case soakEcho, soakExit, soakGiveUp:
		if w := want(StateSucceeded); w != "" {
			return w
		}
		if !u.HasResult || u.Stdout != u.WantStdout || u.ExitCode != u.WantExit || u.ResultInstance != u.Claimer {
			return fmt.Sprintf("result exit %d stdout %q from %q, want exit %d stdout %q", u.ExitCode, u.Stdout, u.ResultInstance, u.WantExit, u.WantStdout)
		}
		if len(es) != 1 {
			return fmt.Sprintf("succeeded, but its script's start was logged %d times", len(es))
		}
	case soakMissing:
		if w := want(StateFailed); w != "" {
			return w
		}
		if len(es) > 0 {
			return "a script not deployed ran"
		}
	case soakTimeout:
		if w := want(StateTimedOut); w != "" {
			return w
		}
		return killed()
	case soakCancel:
		if w := want(StateCancelled); w != "" {
			return w
		}
		return killed()
	}
	return ""
}

// disturbed reports whether a disturbance of the unit's claimer (of any
// proxy, when none claimed it) came during its life or just before: what
// explains a claim lost on its way, or a claimer that died or stopped.
// Resets of the callers' connection explain nothing: they lose no claim.
func disturbed(u *soakUnit, events []soakEvent) bool {
	from, to := u.QueuedAt.Add(-time.Second), maxTime(u.FinishedAt, u.SeenAt).Add(time.Second)
	for _, e := range events {
		if e.Target == Callers || (u.Claimer != "" && e.Target != u.Claimer && e.Target != Machine) {
			continue
		}
		if !e.Start.After(to) && !e.End.Add(soakRecovery).Before(from) {
			return true
		}
	}
	return false
}

// stoodStill is how long the machine stood still between from and to.
func stoodStill(events []soakEvent, from, to time.Time) time.Duration {
	var d time.Duration
	for _, e := range events {
		if e.Target != Machine {
			continue
		}
		if s, t := maxTime(e.Start, from), minTime(e.End, to); t.After(s) {
			d += t.Sub(s)
		}
	}
	return d
}

// stillFor names a time the machine stood still, for a violation.
func stillFor(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return fmt.Sprintf(", %v of it with the machine standing still", d.Round(time.Millisecond))
}

// callersReset reports whether the callers' connection was reset between
// from and to.
func callersReset(events []soakEvent, from, to time.Time) bool {
	for _, e := range events {
		if e.Target == Callers && !e.Start.After(to) && !e.End.Before(from) {
			return true
		}
	}
	return false
}

// Err is nil when the load saw nothing wrong.
func (c soakCheck) Err() error {
	if len(c.Violations) == 0 && len(c.CallerErrors) == 0 {
		return nil
	}
	var b strings.Builder
	if n := len(c.CallerErrors); n > 0 {
		fmt.Fprintf(&b, "CALLER ERRORS: %d calls failed other than by an outage to retry, e.g.:", n)
		for _, e := range c.CallerErrors[:min(n, 10)] {
			fmt.Fprintf(&b, "\n  %s", e)
		}
	}
	if len(c.Violations) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(Report{Violations: c.Violations}.Err().Error())
	}
	return errors.New(b.String())
}

// Table renders the units by kind and the figures of the check.
func (c soakCheck) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| kind | units | as expected | disturbed (explained) | unexpected |\n|---|---:|---:|---:|---:|\n")
	var all soakKindCount
	for k, n := range c.ByKind {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d |\n", soakKind(k), n.Units, n.AsExpected, n.Disturbed, n.Unexpected)
		all.Units += n.Units
		all.AsExpected += n.AsExpected
		all.Disturbed += n.Disturbed
		all.Unexpected += n.Unexpected
	}
	fmt.Fprintf(&b, "| **all** | %d | %d | %d | %d |\n\n", all.Units, all.AsExpected, all.Disturbed, all.Unexpected)
	fmt.Fprintf(&b, "| figure | value |\n|---|---:|\n")
	fmt.Fprintf(&b, "| units succeeded / failed / timed out / cancelled | %d / %d / %d / %d |\n",
		c.ByState[StateSucceeded], c.ByState[StateFailed], c.ByState[StateTimedOut], c.ByState[StateCancelled])
	fmt.Fprintf(&b, "| script executions logged | %d |\n", c.Executions)
	fmt.Fprintf(&b, "| latest timeout after its deadline (the machine running) | %s |\n", ms(c.MaxLate))
	fmt.Fprintf(&b, "| the machine stood still | %d times, longest %s |\n", c.Stalls, ms(c.MaxStall))
	fmt.Fprintf(&b, "| caller errors (other than an outage to retry) | %d |\n", len(c.CallerErrors))
	fmt.Fprintf(&b, "| guarantee violations | %d |\n", len(c.Violations))
	return b.String()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
