package server_test

import (
	"context"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// offsetMetrics is the automator's metrics, telling each estimate of the
// clock offset as it is shown (after the lines it logged).
type offsetMetrics struct {
	*metrics.Metrics
	offsets chan time.Duration
}

func (m offsetMetrics) ClockOffset(d time.Duration) {
	m.Metrics.ClockOffset(d)
	m.offsets <- d
}

// skewedClock is the real clock, set skew ahead.
type skewedClock struct {
	mu   sync.Mutex
	skew time.Duration
}

func (c *skewedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.skew)
}

// Advance sets the clock d further ahead (behind when d < 0).
func (c *skewedClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew += d
}

// skewLog keeps the lines the automator logs.
type skewLog struct {
	mu    sync.Mutex
	lines []skewLine
}

type skewLine struct {
	level slog.Level
	msg   string
}

func (l *skewLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *skewLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *skewLog) WithGroup(string) slog.Handler            { return l }
func (l *skewLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, skewLine{r.Level, r.Message})
	return nil
}

// about returns the lines of level whose message holds part.
func (l *skewLog) about(level slog.Level, part string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if line.level == level && strings.Contains(line.msg, part) {
			out = append(out, line.msg)
		}
	}
	return out
}

// serveOnPostgres runs an automator replica (its sweeper, Server.Run) on a
// fresh schema of the test PostgreSQL, its store wrapped as serve wraps it
// (credentials cache, then metrics), with clock as its clock.
func serveOnPostgres(t *testing.T, clock server.Clock) (*skewLog, offsetMetrics) {
	t.Helper()
	url := os.Getenv(pgtest.EnvURL)
	if url == "" {
		if os.Getenv(pgtest.EnvRequire) != "" {
			t.Fatalf("%s is unset: no PostgreSQL for this test", pgtest.EnvURL)
		}
		t.Skipf("skipping a PostgreSQL test: %s is unset (scripts/pg-start.sh starts one)", pgtest.EnvURL)
	}
	pg, err := pgstore.Open(t.Context(), pgtest.DSNIn(t, url))
	if err != nil {
		t.Fatalf("pgstore.Open: %v", err)
	}
	t.Cleanup(func() { pg.Close() })
	log := &skewLog{}
	m := offsetMetrics{Metrics: metrics.New(metrics.Options{}), offsets: make(chan time.Duration, 16)}
	srv, err := server.New(server.Options{
		Store:         m.Store(store.CachedCredentials(pg, store.CredentialTTL)),
		Metrics:       m,
		Clock:         clock,
		Logger:        slog.New(log),
		SweepInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); waittest.Recv(t, done, "the sweeper to stop") })
	return log, m
}

// clockGauge reads automator_clock_offset_seconds; NaN when it is not
// exported.
func clockGauge(t *testing.T, m *metrics.Metrics) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "automator_clock_offset_seconds" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return math.NaN()
}

// nextOffset waits for the replica's next estimate of its clock's offset
// and checks it, and the gauge, are want within a second.
func nextOffset(t *testing.T, m offsetMetrics, want time.Duration, what string) {
	t.Helper()
	got := waittest.Recv(t, m.offsets, what)
	if (got - want).Abs() > time.Second {
		t.Errorf("%s: offset estimated %v; want %v within 1s", what, got, want)
	}
	if g := clockGauge(t, m.Metrics); math.IsNaN(g) || math.Abs(g-want.Seconds()) > 1 {
		t.Errorf("%s: automator_clock_offset_seconds = %v; want %v within 1", what, g, want.Seconds())
	}
}

// TestAReplicaWhoseClockIsAheadOfTheDatabasesSaysSo: a replica whose clock
// is an hour ahead of its PostgreSQL server's (its injected clock) warns at
// once, saying what it means and what to do; reads +3600 in
// automator_clock_offset_seconds; warns again only after 10 minutes while
// it lasts; says, once, when its clock agrees again; and warns of a clock
// an hour behind in those words. Without the comparison a replica an hour
// ahead times out every unit of the cluster an hour early and says
// nothing of its clock.
func TestAReplicaWhoseClockIsAheadOfTheDatabasesSaysSo(t *testing.T) {
	t.Parallel()
	clock := &skewedClock{skew: time.Hour}
	log, m := serveOnPostgres(t, clock)

	nextOffset(t, m, time.Hour, "the first reading of the database's clock")
	const ahead = "this replica's clock is 1h0m0s ahead of the database server's: units it queues get deadlines that much later, and its sweeper times out every replica's units that much early"
	warned := log.about(slog.LevelWarn, "clock")
	if len(warned) != 1 || !strings.HasPrefix(warned[0], ahead) || !strings.HasSuffix(warned[0], "keep the replicas' clocks in step (NTP)") {
		t.Fatalf("warnings of the clock: %q; want one saying %q …, keep the replicas' clocks in step (NTP)", warned, ahead)
	}

	clock.Advance(time.Minute)
	nextOffset(t, m, time.Hour+time.Minute, "the reading a minute later")
	if warned := log.about(slog.LevelWarn, "clock"); len(warned) != 1 {
		t.Errorf("a minute after the first warning, warnings of the clock: %q; want still the first alone", warned)
	}
	clock.Advance(10 * time.Minute)
	nextOffset(t, m, time.Hour+11*time.Minute, "the reading 11 minutes later")
	if warned := log.about(slog.LevelWarn, "clock"); len(warned) != 2 || !strings.HasPrefix(warned[1], "this replica's clock is 1h11m0s ahead of the database server's") {
		t.Errorf("11 minutes after the first warning, warnings of the clock: %q; want a second, 1h11m0s ahead", warned)
	}

	// Set right: the warning ends, in one line.
	clock.Advance(-time.Hour - 11*time.Minute)
	nextOffset(t, m, 0, "the reading once the clock is set right")
	if agrees := log.about(slog.LevelInfo, "this replica's clock agrees with the database server's again"); len(agrees) != 1 {
		t.Errorf("once the clock is set right, lines saying so: %q; want one", agrees)
	}
	if warned := log.about(slog.LevelWarn, "clock"); len(warned) != 2 {
		t.Errorf("once the clock is set right, warnings of the clock: %q; want the two before", warned)
	}

	// An hour behind.
	clock.Advance(-time.Hour)
	nextOffset(t, m, -time.Hour, "the reading an hour behind")
	const behind = "this replica's clock is 1h0m0s behind the database server's: units it queues get deadlines that much earlier, and its sweeper times out every replica's units that much late"
	if warned := log.about(slog.LevelWarn, "clock"); len(warned) != 3 || !strings.HasPrefix(warned[2], behind) {
		t.Errorf("an hour behind, warnings of the clock: %q; want a third saying %q …", warned, behind)
	}
}

// TestAReplicaInStepWithTheDatabaseSaysNothingOfItsClock: on this machine,
// where the database runs on the same clock, the offset a replica
// estimates is near zero, automator_clock_offset_seconds reads it, and
// nothing is logged of the clock.
func TestAReplicaInStepWithTheDatabaseSaysNothingOfItsClock(t *testing.T) {
	t.Parallel()
	log, m := serveOnPostgres(t, nil)
	nextOffset(t, m, 0, "the first reading of the database's clock")
	if lines := append(log.about(slog.LevelWarn, "clock"), log.about(slog.LevelInfo, "clock")...); len(lines) != 0 {
		t.Errorf("lines about the clock: %q; want none", lines)
	}
}
