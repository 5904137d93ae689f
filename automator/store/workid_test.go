package store

import (
	"regexp"
	"testing"
	"time"
)

var workIDPattern = regexp.MustCompile(`^w_[0-9a-f]{32}$`)

// Work ids have the shape of the automator's other ids, sort by the
// millisecond they were made in (so units queued together share the pages
// of the primary key's index), and stay unique within one millisecond.
func TestWorkIDsSortByTimeAndAreUnique(t *testing.T) {
	t0 := time.UnixMilli(1_790_000_000_000)
	if got, want := NewWorkID(t0)[2:14], "01a0c4506c00"; got != want {
		t.Fatalf("time part = %s, want %s (%d ms in hex)", got, want, t0.UnixMilli())
	}
	seen := make(map[string]bool)
	prev := ""
	for i := range 1000 {
		id := NewWorkID(t0.Add(time.Duration(i/10) * time.Millisecond)) // ten ids per millisecond
		if !workIDPattern.MatchString(id) {
			t.Fatalf("NewWorkID = %q, want w_ and 32 lowercase hex digits", id)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
		if i%10 == 0 && prev != "" && id <= prev {
			t.Fatalf("id %q of a later millisecond does not sort after %q", id, prev)
		}
		prev = id
	}
	// Within one millisecond the random part differs.
	if a, b := NewWorkID(t0), NewWorkID(t0); a[14:] == b[14:] {
		t.Fatalf("two ids of one millisecond share their random part: %q and %q", a, b)
	}
}

// ValidWorkID accepts exactly what NewWorkID makes: w_ and 32 lowercase
// hex digits.
func TestValidWorkIDIsTheShapeOfNewWorkID(t *testing.T) {
	for _, id := range []string{
		NewWorkID(time.Now()), NewWorkID(time.UnixMilli(0)), "w_0123456789abcdef0123456789abcdef",
		"", "w_", "w_0123456789ABCDEF0123456789abcdef", "w_0123456789abcdef0123456789abcde",
		"w_0123456789abcdef0123456789abcdef0", "x_0123456789abcdef0123456789abcdef", "w-0123456789abcdef0123456789abcdef",
		"w_0123456789abcdeg0123456789abcdef", "w_up_queued", " w_0123456789abcdef0123456789abcdef",
	} {
		if got, want := ValidWorkID(id), workIDPattern.MatchString(id); got != want {
			t.Errorf("ValidWorkID(%q) = %v, want %v", id, got, want)
		}
	}
}
