package pgstore

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestDatabaseClockTellsThisMachinesOffset: DatabaseClock reads the
// database server's clock as the statement runs, so the offset the server
// estimates from it (this process's clock at the round trip's midpoint
// minus the reading) is near zero with the database on this machine, and
// a second reading comes later than the first (clock_timestamp(), not a
// transaction's frozen start).
func TestDatabaseClockTellsThisMachinesOffset(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	var last time.Time
	for i := range 3 {
		before := time.Now()
		db, err := s.DatabaseClock(t.Context())
		after := time.Now()
		if err != nil {
			t.Fatalf("DatabaseClock: %v", err)
		}
		offset := before.Add(after.Sub(before) / 2).Sub(db)
		// The database's clock is this machine's: the offset is at most
		// half the round trip, and a microsecond of rounding.
		if bound := after.Sub(before)/2 + 10*time.Millisecond; offset.Abs() > bound {
			t.Errorf("reading %d: offset from the database server's clock %v (read %s, round trip %v); want within %v on one machine",
				i, offset, db.Format(time.RFC3339Nano), after.Sub(before), bound)
		}
		if !db.After(last) {
			t.Errorf("reading %d: the database's clock read %s, not after the reading before (%s)", i, db.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
		}
		last = db
	}
}

// TestDatabaseClockOfAClosedStoreFails: a reading that gets no answer
// is an error naming what failed, never a zero time taken for a clock.
func TestDatabaseClockOfAClosedStoreFails(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), pgtest.DSN(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s.Close()
	if db, err := s.DatabaseClock(t.Context()); err == nil {
		t.Fatalf("DatabaseClock on a closed store = %s, nil; want an error", db)
	}
}
