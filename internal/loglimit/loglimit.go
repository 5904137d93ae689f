// Package loglimit bounds a kind of log line that a lasting fault or a
// caller's load would otherwise repeat without end (a line per unit, per
// refused call): at most Lines of them get a line of their own per Every,
// and the rest are counted, one line saying how many once the interval is
// over. It is the bound the automator's failed authentications have
// (20 lines a minute, then a count).
package loglimit

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// The bound unless a Limiter sets its own.
const (
	DefaultEvery = time.Minute
	DefaultLines = 20
)

// Limiter bounds the lines of one kind. Set its fields before its first
// use; its methods are safe for concurrent use.
type Limiter struct {
	Logger *slog.Logger
	Level  slog.Level
	// Summary is the message of the line counting the lines not written,
	// SummaryAttrs more attributes of it (where to read each one, say).
	Summary      string
	SummaryAttrs []any
	Every        time.Duration    // DefaultEvery when 0
	Lines        int              // DefaultLines when 0
	Now          func() time.Time // time.Now when nil

	mu      sync.Mutex
	start   time.Time // of the current interval
	logged  int       // lines written in it
	dropped int       // lines not written in it
	timer   *time.Timer
}

// Log writes the line msg with attrs when the interval's budget allows,
// after the count of the previous interval's lines not written, if any;
// otherwise it counts it. The count is written when the next line comes
// after the interval, or at the interval's end by a timer, whichever comes
// first (Flush writes it too).
func (l *Limiter) Log(msg string, attrs ...any) { l.LogAt(l.Level, msg, attrs...) }

// LogAt is Log for a line of another level than the Limiter's (the count's
// line has the Limiter's).
func (l *Limiter) LogAt(level slog.Level, msg string, attrs ...any) {
	l.mu.Lock()
	defer l.mu.Unlock() // held while writing: the count's line comes first
	l.flushLocked()
	if l.logged >= l.lines() {
		if l.dropped == 0 {
			l.armLocked()
		}
		l.dropped++
		return
	}
	l.logged++
	l.Logger.Log(context.Background(), level, msg, attrs...)
}

// Flush writes the count of the lines not written in an interval that is
// over, and starts a new interval.
func (l *Limiter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *Limiter) flushLocked() {
	now := l.now()
	if l.start.IsZero() {
		l.start = now
	}
	if now.Sub(l.start) < l.every() {
		return
	}
	if l.dropped > 0 {
		attrs := append([]any{slog.Int("count", l.dropped), slog.Time("since", l.start), slog.Duration("interval", l.every())}, l.SummaryAttrs...)
		l.Logger.Log(context.Background(), l.Level, l.Summary, attrs...)
	}
	l.start, l.logged, l.dropped = now, 0, 0
}

// armLocked starts the timer that writes the count at the end of the
// interval, so that it is written even when no line comes after it. (With
// a Now that is not the real clock, the owner calls Flush as its clock
// moves: the timer then finds the interval not over and writes nothing.)
func (l *Limiter) armLocked() {
	d := l.every() - l.now().Sub(l.start)
	if l.timer != nil {
		l.timer.Reset(d)
		return
	}
	l.timer = time.AfterFunc(d, l.Flush)
}

func (l *Limiter) every() time.Duration {
	if l.Every > 0 {
		return l.Every
	}
	return DefaultEvery
}

func (l *Limiter) lines() int {
	if l.Lines > 0 {
		return l.Lines
	}
	return DefaultLines
}

func (l *Limiter) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}
