package agent

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// backoff is a capped exponential delay with full jitter that resets on
// success.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	// Half fixed, half random: never a busy loop, never in lockstep.
	return b.cur/2 + rand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }

// connState logs the connection to the automator once per change of state,
// not once per attempt.
type connState struct {
	log       *slog.Logger
	automator string // its URL, named when it fails
	up        bool
	known     bool
	lastCode  codes.Code
}

func (s *connState) ok() {
	if s.known && s.up {
		return
	}
	s.log.Info("connected to the automator; polling")
	s.up, s.known = true, true
}

func (s *connState) failed(err error) {
	code := status.Code(err)
	if s.known && !s.up && code == s.lastCode {
		return
	}
	s.up, s.known, s.lastCode = false, true, code
	attrs := []any{"automator", s.automator, "code", code, "err", status.Convert(err).Message()}
	switch code {
	case codes.Unauthenticated, codes.PermissionDenied:
		s.log.Error("the automator refused this proxy's token; check `token` in the config (retrying with backoff)", attrs...)
	case codes.Unavailable, codes.DeadlineExceeded:
		s.log.Warn("automator unreachable; retrying with backoff", attrs...)
	default:
		s.log.Error("poll failed; retrying with backoff", attrs...)
	}
}
