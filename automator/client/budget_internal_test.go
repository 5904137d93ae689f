package client

import (
	"testing"
	"time"
)

// TestABudgetKeepsTheEarliestDeadlineTold: a unit's deadline does not
// move, so a wait's budget keeps the earliest one told. A read past the
// deadline tells 0 left, which reads as a deadline of now: each such read
// moved the deadline, and the retry budget with it, to the read (a
// review, on an automator whose full disk kept its unit from being timed
// out: the caller waited on, saying a new deadline each time).
func TestABudgetKeepsTheEarliestDeadlineTold(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(-time.Minute)
	b := &budget{}
	b.answered(time.Time{})
	if !b.deadline.IsZero() {
		t.Fatalf("a budget told no deadline has %v", b.deadline)
	}
	b.answered(deadline)
	b.answered(time.Now()) // a read past the deadline: 0 left
	b.answered(time.Time{})
	if !b.deadline.Equal(deadline) {
		t.Errorf("deadline %v after later ones were told; want the earliest, %v", b.deadline, deadline)
	}
	b.answered(deadline.Add(-time.Millisecond)) // an answer with a shorter trip
	if !b.deadline.Equal(deadline.Add(-time.Millisecond)) {
		t.Errorf("deadline %v; want the earlier one told last", b.deadline)
	}
}
