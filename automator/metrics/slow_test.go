package metrics

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestSlowStoreCallsAreLoggedAtMostOncePerWindow: a store call that takes
// the threshold or longer is logged at once; the slow calls within the
// next slowLogEvery are counted and logged together, with the slowest, by
// the first call after that time, slow or not; calls under the threshold
// log nothing.
func TestSlowStoreCallsAreLoggedAtMostOncePerWindow(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	c := &slowCalls{log: slog.New(slog.NewTextHandler(&buf, nil)), now: func() time.Time { return now }, threshold: time.Second}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if l != "" {
				out = append(out, l[strings.Index(l, "level="):])
			}
		}
		buf.Reset()
		return out
	}
	const msg = `level=WARN msg="store calls were slow: the database's disk or its connection, or another program holding the database locked, holds up the calls that write, units' ends and timeouts among them"`

	c.note("WorkClaim", 900*time.Millisecond)
	if got := lines(); len(got) != 0 {
		t.Fatalf("a call under the threshold logged %q", got)
	}
	c.note("WorkEnqueue", 2*time.Second)
	if got := lines(); len(got) != 1 || got[0] != msg+" method=WorkEnqueue took=2s" {
		t.Fatalf("the first slow call logged %q", got)
	}
	now = now.Add(time.Second)
	c.note("WorkComplete", 1500*time.Millisecond)
	c.note("WorkExpire", 4200*time.Millisecond)
	c.note("WorkClaim", time.Millisecond)
	if got := lines(); len(got) != 0 {
		t.Fatalf("calls within %v of the last line logged %q", slowLogEvery, got)
	}
	now = now.Add(slowLogEvery)
	c.note("WorkClaim", time.Millisecond)
	if got := lines(); len(got) != 1 || got[0] != msg+" more_slow_calls=2 slowest=4.2s slowest_method=WorkExpire" {
		t.Fatalf("the first call after the window logged %q, want the two slow calls before it", got)
	}
	c.note("WorkClaim", time.Millisecond)
	now = now.Add(time.Minute)
	c.note("WorkClaim", time.Millisecond)
	if got := lines(); len(got) != 0 {
		t.Fatalf("fast calls after the summary logged %q", got)
	}
	c.note("Ping", 3*time.Second)
	if got := lines(); len(got) != 1 || got[0] != msg+" method=Ping took=3s" {
		t.Fatalf("a slow call long after logged %q", got)
	}
}
