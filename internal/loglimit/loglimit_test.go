package loglimit

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// records is a slog.Handler that keeps each record and signals it.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
	c    chan slog.Record
}

func newRecords() *records { return &records{c: make(chan slog.Record, 100)} }

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	r.c <- rec
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m []string
	for _, rec := range r.recs {
		m = append(m, rec.Message)
	}
	return m
}

func countOf(rec slog.Record) int64 {
	var n int64 = -1
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "count" {
			n = a.Value.Int64()
		}
		return true
	})
	return n
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestLinesPastTheBudgetAreCountedInOneLine(t *testing.T) {
	recs := newRecords()
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	l := &Limiter{Logger: slog.New(recs), Level: slog.LevelWarn, Summary: "not logged one by one", Now: clock.Now}
	for range 25 {
		l.Log("a failure")
	}
	if got := len(recs.messages()); got != DefaultLines {
		t.Fatalf("%d lines in the first minute, want %d: %q", got, DefaultLines, recs.messages())
	}
	clock.Add(DefaultEvery)
	l.Log("a failure")
	m := recs.messages()
	if len(m) != DefaultLines+2 || m[DefaultLines] != "not logged one by one" || m[DefaultLines+1] != "a failure" {
		t.Fatalf("after the minute, want the count then the line: %q", m)
	}
	recs.mu.Lock()
	summary := recs.recs[DefaultLines]
	recs.mu.Unlock()
	if n := countOf(summary); n != 5 {
		t.Errorf("count %d, want 5", n)
	}
	if summary.Level != slog.LevelWarn {
		t.Errorf("the count's level %v, want the lines' (WARN)", summary.Level)
	}
}

func TestTheCountIsWrittenAtTheIntervalsEndWithoutAnotherLine(t *testing.T) {
	recs := newRecords()
	l := &Limiter{Logger: slog.New(recs), Level: slog.LevelInfo, Summary: "not logged one by one", Every: 50 * time.Millisecond, Lines: 1}
	l.Log("a")
	l.Log("b")
	l.Log("c")
	<-recs.c // "a"
	select {
	case rec := <-recs.c:
		if rec.Message != "not logged one by one" || countOf(rec) != 2 {
			t.Fatalf("got %q count %d, want the count of 2 lines", rec.Message, countOf(rec))
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no count line 10 s after an interval of 50 ms: %q", recs.messages())
	}
}

func TestAQuietIntervalWritesNoCount(t *testing.T) {
	recs := newRecords()
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	l := &Limiter{Logger: slog.New(recs), Level: slog.LevelInfo, Summary: "not logged one by one", Now: clock.Now}
	l.Log("a")
	clock.Add(DefaultEvery)
	l.Flush()
	l.Log("b")
	if m := recs.messages(); len(m) != 2 || m[0] != "a" || m[1] != "b" {
		t.Fatalf("want the two lines and no count: %q", m)
	}
}

func TestLogAtKeepsTheLinesLevelAndSharesTheBudget(t *testing.T) {
	recs := newRecords()
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	l := &Limiter{Logger: slog.New(recs), Level: slog.LevelWarn, Summary: "not logged one by one", Now: clock.Now, Lines: 1}
	l.LogAt(slog.LevelInfo, "a")
	l.Log("b")
	clock.Add(DefaultEvery)
	l.Flush()
	recs.mu.Lock()
	defer recs.mu.Unlock()
	if len(recs.recs) != 2 || recs.recs[0].Level != slog.LevelInfo || recs.recs[1].Level != slog.LevelWarn || countOf(recs.recs[1]) != 1 {
		t.Fatalf("want a at INFO, then the count of 1 at WARN: %v", recs.recs)
	}
}
