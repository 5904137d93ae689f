package agent

import (
	"testing"
	"time"
)

// TestAClaimReadAfterAStopIsCountedFromTheStop: a claim read as the
// process runs again after a stop is taken to have arrived when the stop
// began (its poll's send, when later), whether the watch has noted the
// stop's end or not yet; one read later than that, or without a stop since
// its poll's send, when it is read (a re-review: a stop long over cut the
// claims of the rest of its poll). The real stop is in test/e2e
// (TestAProxyStoppedWhileItsClaimWaitedKeepsTheAutomatorsDeadline).
func TestAClaimReadAfterAStopIsCountedFromTheStop(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := base
	f := freezeWatch{now: func() time.Time { return now }}
	at := func(d time.Duration) time.Time { return base.Add(d) }
	f.note(at(0))
	f.note(at(250 * time.Millisecond))
	// Stopped from 0.25 s to 10.25 s; read at 10.3 s, the stop noted.
	f.note(at(10250 * time.Millisecond))
	now = at(10300 * time.Millisecond)
	for _, c := range []struct {
		name       string
		sent, want time.Time
	}{
		{"a poll sent before the stop", at(100 * time.Millisecond), at(250 * time.Millisecond)},
		{"a poll sent during the stop", at(5 * time.Second), at(5 * time.Second)},
		{"a poll sent after the stop", at(10260 * time.Millisecond), now},
	} {
		if got := f.arrived(c.sent); !got.Equal(c.want) {
			t.Errorf("%s: arrived at %v, want %v", c.name, got.Sub(base), c.want.Sub(base))
		}
	}
	// Read 4 s after the stop ended, the watch running on: the claim came
	// after the stop.
	for d := 10500 * time.Millisecond; d <= 14250*time.Millisecond; d += 250 * time.Millisecond {
		f.note(at(d))
	}
	now = at(14300 * time.Millisecond)
	if got := f.arrived(at(100 * time.Millisecond)); !got.Equal(now) {
		t.Errorf("a claim read 4 s after the stop's end: arrived at %v, want when read (14.3s)", got.Sub(base))
	}
	// Stopped again from 14.5 s, read at 20 s before the watch notes it.
	f.note(at(14500 * time.Millisecond))
	now = at(20 * time.Second)
	if got := f.arrived(at(14400 * time.Millisecond)); !got.Equal(at(14500 * time.Millisecond)) {
		t.Errorf("a stop under way: arrived at %v, want its start, 14.5s", got.Sub(base))
	}
	// Run on: nothing stops it any more.
	for d := 20 * time.Second; d <= 22*time.Second; d += 250 * time.Millisecond {
		f.note(at(d))
	}
	now = at(22 * time.Second)
	if got := f.arrived(at(21 * time.Second)); !got.Equal(now) {
		t.Errorf("no stop since the send: arrived at %v, want when read (22s)", got.Sub(base))
	}

	var none freezeWatch
	if got := none.arrived(time.Now().Add(-time.Hour)); time.Since(got) > time.Minute {
		t.Errorf("no watch running: arrived %v ago, want now", time.Since(got))
	}
}
