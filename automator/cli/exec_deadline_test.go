package cli

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestExecGivenUpSaysWhetherItsUnitMayStillRun: exec that gives up on a
// queued unit's outcome (no automator answering: the client's wait gives
// up a minute past the unit's deadline) says that a unit whose deadline
// has passed has ended, or ends as soon as an automator serves, and how
// to learn how: not that it may still run, nor how to cancel it. Before
// its deadline it may still run, until then. Before, exec said "may still
// run" and "end it with work cancel" of a unit a minute past its deadline.
func TestExecGivenUpSaysWhetherItsUnitMayStillRun(t *testing.T) {
	t.Parallel()
	dir, none := "/var/lib/automator", ""
	caller := callerFlags{dir: &dir, server: &none, apiKeyFile: &none, caFile: &none}
	past, ahead := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	gaveUp := errors.New("waiting for work w_1 (no automator answered; giving up)")
	for _, tc := range []struct {
		name     string
		deadline time.Time
		want     []string
		not      []string
	}{
		{"past its deadline", past, []string{
			"work w_1 was queued, and its deadline passed at " + past.Format(time.TimeOnly) + ":",
			"it has ended, or ends as soon as an automator serves",
			// work show reads the database itself; work wait would ask
			// the automator that did not answer (a review).
			"learn how, and what it printed, with `automator work show w_1 --data-dir /var/lib/automator --reveal`, which reads the database itself",
		}, []string{"may still run", "work cancel", "work wait"}},
		{"before its deadline", ahead, []string{
			"work w_1 was queued and may still run until its deadline at " + ahead.Format(time.TimeOnly) + ":",
			"`automator work wait w_1 --data-dir /var/lib/automator`",
			"`automator work cancel w_1 --data-dir /var/lib/automator`",
			"once it has ended, `automator work show w_1 --data-dir /var/lib/automator --reveal` gives what it printed",
		}, []string{"passed", "it has ended, or ends"}},
		{"its deadline unknown", time.Time{}, []string{
			"work w_1 was queued and may still run: follow it",
			"`automator work cancel w_1 --data-dir /var/lib/automator`",
		}, []string{"passed", "it has ended, or ends"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := stillQueued("w_1", tc.deadline, gaveUp, caller).Error()
			if !strings.HasPrefix(msg, gaveUp.Error()+"; ") {
				t.Errorf("%q does not begin with the error that ended exec", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(msg, n) {
					t.Errorf("%q says %q", msg, n)
				}
			}
		})
	}
}

// TestRetryingSaysOnceMoreWhenItsBudgetIsSpent: the line of an automator
// not answering says how long exec keeps trying; with under half a second
// left (a cancel's budget after an interrupt), "for 0s more" said nothing.
func TestRetryingSaysOnceMoreWhenItsBudgetIsSpent(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		left time.Duration
		want string
	}{
		{time.Minute, "cancelling work w_1: trying again for 1m0s more (until 03:05:05), Ctrl-C stops"},
		{700 * time.Millisecond, "cancelling work w_1: trying again for 1s more (until 03:04:05), Ctrl-C stops"},
		{400 * time.Millisecond, "cancelling work w_1: trying once more"},
		{-time.Second, "cancelling work w_1: trying once more"},
	} {
		if got := retrying("cancelling work w_1", now.Add(c.left), now); got != c.want {
			t.Errorf("%v left: %q, want %q", c.left, got, c.want)
		}
	}
}
