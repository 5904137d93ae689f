package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// With several replicas sharing a PostgreSQL database, "the automator's
// clock" of guarantee 6 is each replica's own: a unit's deadline is the
// clock of the replica that queued it plus its timeout, and every
// replica's sweeper times units out by its own clock. A replica whose
// clock is an hour ahead times out every open unit of the cluster an hour
// early, with reasons that point at the proxies ("none online (last
// polled 1h ago)"). So each replica compares its clock with the database
// server's, which they share, and says so when they disagree.

// DatabaseClock is implemented by a store whose database server keeps a
// clock of its own that other replicas share (pgstore.Store; package
// metrics' wrapper of any store, which returns errors.ErrUnsupported when
// the store beneath has none). SQLite's store has none: its database runs
// on the automator's own clock.
type DatabaseClock interface {
	// DatabaseClock reads the database server's clock, in one round trip.
	DatabaseClock(ctx context.Context) (time.Time, error)
}

// ClockMetrics is implemented by a Metrics that also shows this replica's
// clock offset from its database server's (package metrics does).
type ClockMetrics interface {
	// ClockOffset: this replica's clock minus the database server's, as
	// last estimated.
	ClockOffset(offset time.Duration)
}

const (
	// clockCheckEvery is how often, on the automator's clock, the
	// database server's clock is read.
	clockCheckEvery = 30 * time.Second
	// clockUncertain: a reading whose round trip took longer is ignored,
	// as the offset estimated from it may be off by half of it.
	clockUncertain = 500 * time.Millisecond
	// clockSkewed: an offset over it, either way, is warned of.
	clockSkewed = time.Second
	// clockAgrees: a clock warned of agrees again once its offset is under
	// it (not merely under clockSkewed: a clock drifting slowly past 1 s
	// would otherwise have its warning and its end logged by turns, for
	// hours, as each reading's error falls on either side).
	clockAgrees = 500 * time.Millisecond
	// clockWarnEvery: while the offset stays over clockSkewed, the warning
	// is repeated this often.
	clockWarnEvery = 10 * time.Minute
)

// clockWatch is watchClock's state.
type clockWatch struct {
	checked time.Time // on the automator's clock, of the last reading; zero before the first
	skewed  bool      // warned of, and not under clockAgrees since
	ahead   bool      // the direction of the last warning
	warned  time.Time // on the automator's clock, of the last warning
}

// watchClock reads the database server's clock when the automator starts,
// then every clockCheckEvery, until ctx is done or the automator shuts
// down: each reading whose round trip took under clockUncertain estimates
// this replica's offset from it (this replica's clock at the round trip's
// midpoint minus the database's), which ClockMetrics shows. An offset over
// clockSkewed is logged as a warning when it starts and every
// clockWarnEvery while it lasts, and its end at info level. A store
// without a clock of its own (SQLite) ends it at once.
//
// It looks every SweepInterval whether clockCheckEvery has passed on the
// automator's clock (either way: a test's clock may be set back).
func (s *Server) watchClock(ctx context.Context) {
	dc := databaseClockOf(s.store)
	if dc == nil {
		return
	}
	var w clockWatch
	t := time.NewTicker(s.sweepInterval)
	defer t.Stop()
	for {
		if now := s.clock.Now(); w.checked.IsZero() || now.Sub(w.checked).Abs() >= clockCheckEvery {
			w.checked = now
			if !s.checkClock(ctx, dc, &w) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.shutdown:
			return
		case <-t.C:
		}
	}
}

// databaseClockOf is st's DatabaseClock, or the one of the store beneath
// its credentials' cache; nil when it has none.
func databaseClockOf(st store.Store) DatabaseClock {
	if dc, ok := st.(DatabaseClock); ok {
		return dc
	}
	if dc, ok := store.Uncached(st).(DatabaseClock); ok {
		return dc
	}
	return nil
}

// checkClock reads the database server's clock once and acts on the
// offset it tells (watchClock). It reports false when the store has no
// clock of its own after all (errors.ErrUnsupported).
func (s *Server) checkClock(ctx context.Context, dc DatabaseClock, w *clockWatch) bool {
	cctx, cancel := context.WithTimeout(ctx, s.sweepTimeout)
	defer cancel()
	before, start := s.clock.Now(), time.Now()
	db, err := dc.DatabaseClock(cctx)
	took, after := time.Since(start), s.clock.Now()
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return false
	case err != nil:
		// The sweeper and the watch for deleted accounts say when the
		// database is out of reach; the next reading is in
		// clockCheckEvery.
		if ctx.Err() == nil {
			s.log.Debug("reading the database server's clock", "err", err)
		}
		return true
	case took > clockUncertain:
		s.log.Debug("ignored a reading of the database server's clock: its round trip took too long to tell this replica's offset from it", "round_trip", took)
		return true
	}
	offset := before.Add(after.Sub(before) / 2).Sub(db)
	ahead := offset > 0
	switch {
	case offset.Abs() > clockSkewed && (!w.skewed || ahead != w.ahead || after.Sub(w.warned).Abs() >= clockWarnEvery):
		w.skewed, w.ahead, w.warned = true, ahead, after
		s.log.Warn(clockSkewMessage(offset), "offset", offset, "database_clock", db.UTC().Format(time.RFC3339Nano))
	case w.skewed && offset.Abs() < clockAgrees:
		w.skewed = false
		s.log.Info(fmt.Sprintf("this replica's clock agrees with the database server's again, within %v", clockAgrees), "offset", offset)
	}
	if cm, ok := s.metrics.(ClockMetrics); ok {
		cm.ClockOffset(offset)
	}
	return true
}

// clockSkewMessage says what an offset of this replica's clock from the
// database server's means.
func clockSkewMessage(offset time.Duration) string {
	by := offset.Abs()
	if by < time.Minute {
		by = by.Round(100 * time.Millisecond)
	} else {
		by = by.Round(time.Second)
	}
	if offset > 0 {
		return fmt.Sprintf("this replica's clock is %v ahead of the database server's: units it queues get deadlines that much later, and its sweeper times out every replica's units that much early (their reasons then say proxies last polled that long ago); keep the replicas' clocks in step (NTP)", by)
	}
	return fmt.Sprintf("this replica's clock is %v behind the database server's: units it queues get deadlines that much earlier, and its sweeper times out every replica's units that much late, accepting their results until then; keep the replicas' clocks in step (NTP)", by)
}
