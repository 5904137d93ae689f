package server

import (
	"fmt"
	"testing"
	"time"
)

// TestFailureLimiterGroupsIPv6By64AndStaysBounded: addresses of one IPv6
// /64 share a budget (walking a subnet gains nothing), IPv4 addresses each
// have their own (written IPv4-mapped or not), and however many sources fail, the table stays bounded,
// forgetting first the sources whose budget is whole again.
func TestFailureLimiterGroupsIPv6By64AndStaysBounded(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := newFailureLimiter(2, time.Minute)
	for i := range 2 {
		if ok, _ := l.fail(fmt.Sprintf("2001:db8::%x", i+1), now); !ok {
			t.Fatalf("failure %d of the /64: refused within the budget", i+1)
		}
	}
	if ok, first := l.fail("2001:db8::ffff:1", now); ok || !first {
		t.Fatalf("a third failure from the same /64: ok=%v first=%v, want refused, first", ok, first)
	}
	if ok, first := l.fail("2001:db8::ffff:2", now); ok || first {
		t.Fatalf("a fourth: ok=%v first=%v, want refused, not first", ok, first)
	}
	if ok, _ := l.fail("2001:db8:0:1::1", now); !ok {
		t.Fatalf("another /64 was refused")
	}
	if ok, _ := l.fail("192.0.2.1", now); !ok {
		t.Fatalf("an IPv4 address was refused")
	}
	if ok, _ := l.fail("192.0.2.2", now); !ok {
		t.Fatalf("a neighbouring IPv4 address was refused")
	}
	// The same IPv4 address written as IPv4-mapped IPv6 spends the same
	// budget (its second failure, then a refused third).
	if ok, _ := l.fail("::ffff:192.0.2.1", now); !ok {
		t.Fatalf("the second failure of 192.0.2.1, IPv4-mapped, was refused")
	}
	if ok, _ := l.fail("::ffff:c000:201", now); ok {
		t.Fatalf("a third failure of 192.0.2.1, IPv4-mapped, gained a fresh budget")
	}

	// Fill the table with sources that keep failing: it never grows past
	// its bound.
	l = newFailureLimiter(2, time.Minute)
	t0 := now.Add(-10 * time.Minute)
	for i := range maxLimitedSources + 100 {
		l.fail(fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff), t0)
	}
	if n := len(l.buckets); n > maxLimitedSources {
		t.Fatalf("the limiter holds %d sources, more than %d", n, maxLimitedSources)
	}
	// Ten minutes later their budgets are whole again: a new source makes
	// room by forgetting them, and a source whose budget is spent is kept.
	spent := "198.51.100.7"
	l.fail(spent, now)
	l.fail(spent, now)
	if n := len(l.buckets); n != 1 {
		t.Fatalf("after the refill the limiter holds %d sources, want only the new one", n)
	}
	for i := range 10 {
		l.fail(fmt.Sprintf("203.0.113.%d", i), now)
	}
	if ok, _ := l.fail(spent, now); ok {
		t.Fatalf("the spent source got a fresh budget")
	}
}

// TestFailureBudgetRefillsOnlyUpToItsBurst: a source that failed once and
// then stayed quiet for a day regains its burst, not a day's worth of
// failures: a burst of guesses after a pause is refused past the burst.
func TestFailureBudgetRefillsOnlyUpToItsBurst(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := newFailureLimiter(3, time.Minute)
	if ok, _ := l.fail("192.0.2.1", now); !ok {
		t.Fatal("the first failure was refused")
	}
	later := now.Add(24 * time.Hour)
	for i := range 3 {
		if ok, _ := l.fail("192.0.2.1", later); !ok {
			t.Fatalf("failure %d of 3 a day later was refused within the burst", i+1)
		}
	}
	if ok, first := l.fail("192.0.2.1", later); ok || !first {
		t.Fatalf("a fourth failure at once a day later: ok=%v first=%v, want refused (the burst is 3)", ok, first)
	}
	if d := l.retryAfter("192.0.2.1", later); d != time.Minute {
		t.Errorf("retry after %v, want one refill (1m)", d)
	}
}

// TestRetryAfterIsRoundedUpToAWholeSecond: the time a source over its
// budget is told to wait is never less than the time until it may fail
// once more, so that waiting as long is enough.
func TestRetryAfterIsRoundedUpToAWholeSecond(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := newFailureLimiter(1, time.Minute)
	l.fail("192.0.2.1", now)
	if ok, _ := l.fail("192.0.2.1", now); ok {
		t.Fatal("a second failure at once was allowed past a burst of 1")
	}
	for _, tc := range []struct {
		after time.Duration
		want  time.Duration
	}{
		{0, time.Minute},
		{600 * time.Millisecond, time.Minute}, // 59.4 s left
		{time.Second, 59 * time.Second},
		{59*time.Second + 999*time.Millisecond, time.Second},
	} {
		if got := l.retryAfter("192.0.2.1", now.Add(tc.after)); got != tc.want {
			t.Errorf("%v after the refused failure: retry after %v, want %v", tc.after, got, tc.want)
		}
	}
}
