package agent

import (
	"context"
	"sync"
	"time"
)

// freezeTick is how often freezeWatch notes that the process runs, and
// freezeGap the silence between two notes that tells it did not: stopped
// (SIGSTOP, a debugger), or its host frozen or starved that long.
const (
	freezeTick = 250 * time.Millisecond
	freezeGap  = time.Second
)

// freezeRead is how soon after a stop's end, as the ticker noted it, a
// claim read is taken to have waited through the stop: both run as the
// process resumes, the ticker's note being overdue.
const freezeRead = 2 * freezeTick

// freezeWatch tells when a claim read now may have come: a claim's
// deadline is the time remaining the automator gave it, counted from its
// arrival, and an answer that came while this process was stopped is read
// only once it runs again, its time partly spent (a review: a proxy
// resumed after 25 s gave its script the whole 39 s left at the send, ran
// it 12 s past the unit's deadline, and told the script so too). The
// kernel keeps no arrival time this process can read, so a stop is found
// by its gap in a ticker's notes, and a claim read after one is counted
// from the gap's start (from its poll's send at the earliest).
type freezeWatch struct {
	mu   sync.Mutex
	last time.Time // the latest note
	// gapStart and gapEnd bound the latest gap seen between two notes.
	gapStart, gapEnd time.Time
	// now is time.Now, unless a test sets it.
	now func() time.Time
}

func (f *freezeWatch) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// run notes every freezeTick until ctx ends.
func (f *freezeWatch) run(ctx context.Context) {
	f.note(f.clock())
	t := time.NewTicker(freezeTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.note(f.clock())
		}
	}
}

func (f *freezeWatch) note(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.last.IsZero() && now.Sub(f.last) > freezeGap {
		f.gapStart, f.gapEnd = f.last, now
	}
	f.last = now
}

// arrived is when a claim read now, of a poll sent at sent, is taken to
// have come: now, unless this process was stopped since sent and is read
// as it resumes (a gap under way the ticker has not noted the end of yet,
// or one it saw end after sent and at most freezeRead before now), then
// the gap's start or sent, whichever is later. An answer that waited in
// the socket through a stop is read at once as the process runs again: a
// claim read later came after the stop, and its time is its own (a
// re-review: every claim of the rest of a poll was cut by a stop long
// over, short ones to nothing). Without notes (the watch not running) it
// is now.
func (f *freezeWatch) arrived(sent time.Time) time.Time {
	now := f.clock()
	f.mu.Lock()
	defer f.mu.Unlock()
	var from time.Time
	switch {
	case !f.last.IsZero() && now.Sub(f.last) > freezeGap:
		from = f.last
	case f.gapEnd.After(sent) && now.Sub(f.gapEnd) <= freezeRead:
		from = f.gapStart
	default:
		return now
	}
	if from.Before(sent) {
		return sent
	}
	return from
}
