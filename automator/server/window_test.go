package server

import (
	"testing"
	"time"
)

// TestLongPollWindowsEndOnTheTick: a window of 20 ticks or more is
// lengthened, by less than a tick, to end on a multiple of pollTick, so that
// idle polls end (and are polled again) together; a shorter one is kept.
func TestLongPollWindowsEndOnTheTick(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 22, 0, 0, 0, time.UTC)
	for _, offset := range []time.Duration{0, time.Nanosecond, 17 * time.Millisecond, pollTick / 2, pollTick - time.Nanosecond, 3*time.Second + 123456789} {
		now := start.Add(offset)
		for _, d := range []time.Duration{20 * pollTick, 30 * time.Second, 32*time.Second + 987654321} {
			got := onTick(now, d)
			if end := now.Add(got); end.UnixNano()%int64(pollTick) != 0 {
				t.Errorf("onTick(%v, %v) = %v: ends at %v, not on a multiple of %v", now.Format(time.StampNano), d, got, end.Format(time.StampNano), pollTick)
			}
			if got < d || got-d >= pollTick {
				t.Errorf("onTick(%v, %v) = %v: lengthened by %v, want [0, %v)", now.Format(time.StampNano), d, got, got-d, pollTick)
			}
		}
		for _, d := range []time.Duration{0, time.Second, 20*pollTick - time.Nanosecond} {
			if got := onTick(now, d); got != d {
				t.Errorf("onTick(%v, %v) = %v: a window shorter than 20 ticks changed", now.Format(time.StampNano), d, got)
			}
		}
	}
}
