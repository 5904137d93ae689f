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

// newBackLog bounds the lines saying that the database takes writes again
// after a fault (a full disk, another program's lock): a few a minute, for
// a fault that comes and goes in turn, however many lines the fault itself
// wrote. summary is the line counting those not written.
func newBackLog(log *slog.Logger, clock Clock, summary string) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelInfo, Now: clock.Now, Lines: 5, Summary: summary}
}

// newLockedLog bounds the lines of store calls that failed because another
// program held the SQLite database locked: each call that writes fails so
// while it lasts.
func newLockedLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelError, Now: clock.Now,
		Summary:      "store calls that found the database locked by another program, not logged one by one",
		SummaryAttrs: []any{"see", `automator_store_errors_total{kind="locked"}`}}
}

// newInternalLog bounds the lines of internal errors: each call may meet
// one while a fault of a kind not told apart lasts.
func newInternalLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelError, Now: clock.Now,
		Summary:      "internal errors, not logged one by one",
		SummaryAttrs: []any{"see", `automator_store_errors_total{kind="other"}`}}
}

// newUnfailedLog bounds the lines of units handed to a poll whose answer
// never reached its proxy, which could not be failed: while the database
// fails every write (locked, out of reach), one a unit, at the callers'
// pace, most of them units whose storing failed too.
func newUnfailedLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelWarn, Now: clock.Now,
		Summary:      "units claimed for polls whose answers never reached their proxies that could not be failed, not logged one by one: those stored time out at their deadlines",
		SummaryAttrs: []any{"see", "automator_store_errors_total"}}
}

// newDamagedLog bounds the lines of store calls that failed on a damaged
// database: each call that reads or writes the damaged part fails, every
// time, until it is repaired. Each caller is told; the lines say what to
// do (repair). The calls of callers and proxies (of) and the automator's
// own (the sweeper's, every second while units are due) have a bound
// each, so that neither takes the other's lines.
func newDamagedLog(log *slog.Logger, clock Clock, of, repair string) *loglimit.Limiter {
	attrs := []any{"see", `automator_store_errors_total{kind="damaged"}`}
	if repair != "" {
		attrs = append(attrs, "repair", repair)
	}
	return &loglimit.Limiter{Logger: log, Level: slog.LevelError, Now: clock.Now,
		Summary:      "store calls " + of + " that met the damaged database, not logged one by one: repair it",
		SummaryAttrs: attrs}
}

// damaged logs, within damagedLog's bound, a call of a caller or a proxy
// that met a damaged database.
func (s *Server) damaged(doing string, attrs ...any) { s.damagedOn(s.damagedLog, doing, attrs...) }

// damagedOn logs, within l's bound, a store call that met a damaged
// database.
func (s *Server) damagedOn(l *loglimit.Limiter, doing string, attrs ...any) {
	attrs = append(attrs, "doing", doing)
	if s.repair != "" {
		attrs = append(attrs, "repair", s.repair)
	}
	l.Log("the database is damaged: the calls that read or write its damaged part fail until it is repaired", attrs...)
}

// newRefusedPollLog bounds the lines of polls refused for their
// instance's keys (none usable, or another account's): each such instance
// polls again with backoff, every 15 s at most, until its profile is
// replaced, so a rotation without --overlap that left a thousand
// instances behind would write some 4,000 lines a minute. Each is listed
// refused, with its cause, and counted in automator_instances_refused.
func newRefusedPollLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelWarn, Now: clock.Now,
		Summary:      "polls refused for their instance's keys, not logged one by one",
		SummaryAttrs: []any{"see", "automator instances --account A (STATUS refused, and why), and automator_instances_refused"}}
}

// newQueueFullLog bounds the lines of units refused for a full queue: a
// caller that submits again at once, without the wait its answer asks
// for, would write one per call. Each is in the audit log and
// automator_work_refused_total.
func newQueueFullLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelWarn, Now: clock.Now,
		Summary:      "units refused for a full queue, not logged one by one",
		SummaryAttrs: []any{"see", `the audit log (work.refused), and automator_work_refused_total{reason="queue_full"}`}}
}

// newInstanceCapLog bounds the lines of polls refused because their
// account holds as many instance records as it may: a proxy choosing a new
// instance id for each poll would write one per poll.
func newInstanceCapLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelWarn, Now: clock.Now,
		Summary:      "polls of new instances refused for their account's bound of instance records, not logged one by one",
		SummaryAttrs: []any{"see", "automator instances --account A"}}
}

// newDeniedLog bounds the lines of calls refused because the API key may
// not use the account they name: a caller given the wrong account would
// write one per call. Each is in the audit log and
// automator_auth_denied_total.
func newDeniedLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelWarn, Now: clock.Now,
		Summary:      "calls of API keys outside their accounts, not logged one by one",
		SummaryAttrs: []any{"see", "the audit log (auth.denied), and automator_auth_denied_total"}}
}

// flushLogLimits writes the counts of the bounded lines not written in an
// interval that is over: the sweeper calls it, so a clock that is not the
// real one (tests) has its counts written too.
func (s *Server) flushLogLimits() {
	s.authFailLog.Flush()
	s.timedOutLog.Flush()
	s.diskFullLog.Flush()
	s.diskBackLog.Flush()
	s.lockBackLog.Flush()
	s.damagedLog.Flush()
	s.ownDamagedLog.Flush()
	s.refusedPollLog.Flush()
	s.queueFullLog.Flush()
	s.instanceCapLog.Flush()
	s.deniedLog.Flush()
}

// writesMark is taken before a write whose success may end a full disk or
// a lock: see wrote.
type writesMark struct{ full, locked uint64 }

func (s *Server) writeMark() writesMark {
	return writesMark{full: s.fullWrites.Load(), locked: s.lockedWrites.Load()}
}

// wrote ends a full disk, or a lock another program held, saying so once,
// when the write begun at mark succeeded and no write failed so since it
// began (a write under way when the fault began says nothing of it),
// within a bound of its own (diskBackLog, lockBackLog): the fault's lines
// may have used theirs up. It costs two atomic loads when neither fault is
// on.
func (s *Server) wrote(mark writesMark) {
	if s.diskFull.Load() && s.fullWrites.Load() == mark.full && s.diskFull.CompareAndSwap(true, false) {
		// SQLite reuses the pages it freed, so a disk just full takes
		// some writes between refusals.
		s.diskBackLog.Log("the database takes writes again: the disk has space")
	}
	s.lockTaken(mark)
}

// lockTaken is wrote for a write transaction that may have written
// nothing (the sweeper's, with nothing due): it ends a lock another
// program held, as taking the lock shows, but not a full disk, which a
// transaction that writes nothing does not test.
func (s *Server) lockTaken(mark writesMark) {
	if s.dbLocked.Load() && s.lockedWrites.Load() == mark.locked && s.dbLocked.CompareAndSwap(true, false) {
		s.lockBackLog.Log("the database takes writes again: the program that held it locked has let go")
	}
}
