package server

import (
	"log/slog"
	"sync"
	"time"
)

// The log lines of failed authentications are bounded for the whole
// automator, not per source: the failure budget (ratelimit.go) lets each
// source address fail failed_auth_burst times, so a client holding many
// addresses (a botnet, an IPv6 prefix) would otherwise write a line per
// attempt. At most authLogLines failures get a line of their own per
// authLogEvery; the rest are counted, and one line says how many once the
// interval is over. The audit log and the metric still see each one.
const (
	authLogEvery = time.Minute
	authLogLines = 20
)

// AuthMetrics is implemented by a Metrics that also counts failed
// authentications (package metrics does).
type AuthMetrics interface {
	// AuthFailed: a call or sign-in presented a missing, wrong, expired
	// or revoked credential; limited: its source was over its budget.
	AuthFailed(limited bool)
}

// authLog holds the current interval's count of failure lines.
type authLog struct {
	mu      sync.Mutex
	start   time.Time // of the current interval
	logged  int       // lines written in it
	dropped int       // failures not logged in it
}

// logAuthFailure writes the line of a failed authentication (msg with
// attrs) when the interval's budget allows, after the count of the
// previous interval's failures not logged, if any.
func (s *Server) logAuthFailure(now time.Time, msg string, attrs ...any) {
	l := &s.authLog
	l.mu.Lock()
	defer l.mu.Unlock() // held while writing: the count's line comes first
	s.flushAuthLogLocked(now)
	if l.logged >= authLogLines {
		l.dropped++
		return
	}
	l.logged++
	s.log.Warn(msg, attrs...)
}

// flushAuthLog writes the count of the failures not logged in an interval
// that is over (the sweeper calls it, so the count is written even when
// no failure comes after the interval).
func (s *Server) flushAuthLog(now time.Time) {
	s.authLog.mu.Lock()
	defer s.authLog.mu.Unlock()
	s.flushAuthLogLocked(now)
}

func (s *Server) flushAuthLogLocked(now time.Time) {
	l := &s.authLog
	if l.start.IsZero() {
		l.start = now
	}
	if now.Sub(l.start) < authLogEvery {
		return
	}
	if l.dropped > 0 {
		s.log.Warn("failed authentications not logged one by one",
			slog.Int("count", l.dropped), slog.Time("since", l.start), slog.Duration("interval", authLogEvery),
			slog.String("see", "the audit log (auth.failed) and automator_auth_failures_total"))
	}
	l.start, l.logged, l.dropped = now, 0, 0
}
