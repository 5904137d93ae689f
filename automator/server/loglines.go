package server

import (
	"log/slog"

	"github.com/opsgate/opsgate/internal/loglimit"
)

// Lines a caller's load or a lasting fault would repeat without end are
// bounded as those of failed authentications are (authlog.go): 20 a
// minute, then one line counting the rest once the minute is over. Where
// each one is kept says the count's line.

// newTimedOutLog bounds the lines of units timed out: callers queueing
// work for an account no proxy serves would write one per unit. Each
// timeout is in the unit's record, the audit log and the metrics.
func newTimedOutLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelInfo, Now: clock.Now,
		Summary:      "units timed out, not logged one by one",
		SummaryAttrs: []any{"see", `automator work list --state timed_out, and automator_work_finished_total{state="timed_out"}`}}
}

// newDiskFullLog bounds the lines of store calls refused for lack of disk
// space: each call of each caller and proxy fails while it lasts. Each
// caller is told; the first lines say what to do.
func newDiskFullLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelError, Now: clock.Now,
		Summary:      "store calls refused for lack of disk space, not logged one by one: free space for the database",
		SummaryAttrs: []any{"see", `automator_store_errors_total{kind="storage_full"}`}}
}

// flushLogLimits writes the counts of the bounded lines not written in an
// interval that is over: the sweeper calls it, so a clock that is not the
// real one (tests) has its counts written too.
func (s *Server) flushLogLimits() {
	s.authFailLog.Flush()
	s.timedOutLog.Flush()
	s.diskFullLog.Flush()
}

// writeMark is taken before a write whose success may end a full disk: see
// wrote.
func (s *Server) writeMark() uint64 { return s.fullWrites.Load() }

// wrote ends a full disk, saying so once, when the write begun at mark
// succeeded and no write was refused for lack of space since it began (a
// write under way when space ran out says nothing of it), within the
// bound of the full disk's lines. It costs one
// atomic load when the disk is not full.
func (s *Server) wrote(mark uint64) {
	if s.diskFull.Load() && s.fullWrites.Load() == mark && s.diskFull.CompareAndSwap(true, false) {
		// Within the full disk's bound: SQLite reuses the pages it
		// freed, so a disk just full takes some writes between refusals.
		s.diskFullLog.LogAt(slog.LevelInfo, "the database takes writes again: the disk has space")
	}
}
