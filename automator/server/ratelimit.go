package server

import (
	"net"
	"sync"
	"time"
)

// maxLimitedSources bounds the memory of the failed-authentication budget.
const maxLimitedSources = 1 << 16

// failureLimiter budgets failed authentications per source address: a
// token bucket of burst failures, one regained every refill. Only failures
// spend it, and it is consulted only once a credential was found wrong, so
// a call with a valid token or API key is never slowed nor refused, even
// from an address that is over its budget (a healthy proxy behind the same
// NAT as a misconfigured one keeps working).
type failureLimiter struct {
	burst  float64
	refill time.Duration

	mu      sync.Mutex
	buckets map[string]*failureBucket
}

type failureBucket struct {
	tokens float64
	at     time.Time // when tokens was computed
	over   bool      // the last failure was refused
}

func newFailureLimiter(burst int, refill time.Duration) *failureLimiter {
	return &failureLimiter{burst: float64(burst), refill: refill, buckets: make(map[string]*failureBucket)}
}

// fail spends one failure of source at now. ok says whether the source was
// within its budget; first is true for the first refused failure after
// allowed ones (when the source goes over its budget).
func (l *failureLimiter) fail(source string, now time.Time) (ok, first bool) {
	key := limitKey(source)
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		l.makeRoom(now)
		b = &failureBucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	l.refillBucket(b, now)
	if b.tokens >= 1 {
		b.tokens--
		b.over = false
		return true, false
	}
	first = !b.over
	b.over = true
	return false, first
}

// retryAfter is how long until source may fail once more, in whole
// seconds, rounded up: a caller that waits as long is not refused again
// (rounded to the nearest, 59.4 s left read 59s).
func (l *failureLimiter) retryAfter(source string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[limitKey(source)]
	if b == nil {
		return 0
	}
	l.refillBucket(b, now)
	left := time.Duration((1 - b.tokens) * float64(l.refill))
	return max((left+time.Second-1)/time.Second*time.Second, time.Second)
}

func (l *failureLimiter) refillBucket(b *failureBucket, now time.Time) {
	if el := now.Sub(b.at); el > 0 {
		b.tokens = min(l.burst, b.tokens+float64(el)/float64(l.refill))
		b.at = now
	}
}

// makeRoom forgets sources whose budget is whole again, and if that is not
// enough an arbitrary one (which then starts afresh): the map stays bounded
// however many addresses fail.
func (l *failureLimiter) makeRoom(now time.Time) {
	if len(l.buckets) < maxLimitedSources {
		return
	}
	for k, b := range l.buckets {
		if b.tokens+float64(now.Sub(b.at))/float64(l.refill) >= l.burst {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < maxLimitedSources {
			break
		}
		delete(l.buckets, k)
	}
}

// limitKey groups IPv6 addresses by /64, the block one host usually has,
// so that walking through a subnet's addresses gains no fresh budget. An
// IPv4 address written as IPv4-mapped IPv6 (::ffff:192.0.2.1) shares the
// budget of its IPv4 form.
func limitKey(source string) string {
	ip := net.ParseIP(source)
	if ip == nil {
		return source
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}
