package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
)

// clockStore is a store whose database has a clock of its own, behind the
// credentials' cache as serve opens it.
type clockStore struct {
	nilStore
	at time.Time
}

func (s clockStore) DatabaseClock(context.Context) (time.Time, error) { return s.at, nil }

// TestClockOffsetIsExportedOnceEstimated: automator_clock_offset_seconds
// is not exported before the server gives an estimate (never with SQLite,
// whose database runs on the automator's own clock), then reads the last
// one, in seconds.
func TestClockOffsetIsExportedOnceEstimated(t *testing.T) {
	m := metrics.New(metrics.Options{})
	var _ server.ClockMetrics = m
	if s := sample(scrape(t, m), "automator_clock_offset_seconds", nil); s != nil {
		t.Fatalf("automator_clock_offset_seconds before any estimate: %v; want none", s)
	}
	m.ClockOffset(3200 * time.Millisecond)
	m.ClockOffset(-1500 * time.Millisecond)
	if s := sample(scrape(t, m), "automator_clock_offset_seconds", nil); s.GetGauge().GetValue() != -1.5 {
		t.Errorf("automator_clock_offset_seconds = %v; want -1.5", s)
	}
}

// TestDatabaseClockPassesThroughTheWrapper: the timed store reads the
// clock of the database beneath it (and the credentials' cache), timing
// the call like the store's; over a store with none (SQLite) it says
// errors.ErrUnsupported, which stops the server from asking again.
func TestDatabaseClockPassesThroughTheWrapper(t *testing.T) {
	m := metrics.New(metrics.Options{})
	at := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	dc, ok := m.Store(store.CachedCredentials(clockStore{at: at}, time.Minute)).(server.DatabaseClock)
	if !ok {
		t.Fatal("the timed store has no DatabaseClock")
	}
	if got, err := dc.DatabaseClock(t.Context()); err != nil || !got.Equal(at) {
		t.Errorf("DatabaseClock = %v, %v; want %v, nil", got, err, at)
	}
	if s := sample(scrape(t, m), "automator_store_call_seconds", map[string]string{"method": "DatabaseClock"}); s.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("automator_store_call_seconds{method=\"DatabaseClock\"} counts %d calls; want 1", s.GetHistogram().GetSampleCount())
	}
	if _, err := m.Store(nilStore{}).(server.DatabaseClock).DatabaseClock(t.Context()); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("DatabaseClock over a store without one: %v; want errors.ErrUnsupported", err)
	}
}
