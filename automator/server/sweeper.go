package server

import (
	"context"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// Run ends units at their deadlines until ctx is done. It sleeps until the
// earliest deadline (or SweepInterval, whichever comes first, so units
// queued by other replicas are seen), and a new unit whose deadline comes
// before that wakes it earlier.
//
// With a Broadcaster it also listens for other replicas' events. It also
// looks for accounts deleted meanwhile every SweepInterval (deleted.go),
// and, with a database server of its own (PostgreSQL), compares this
// replica's clock with that server's every 30 s (clockoffset.go).
func (s *Server) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	listening, watching, clocking := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { s.listen(ctx); close(listening) }()
	go func() { s.watchDeletions(ctx); close(watching) }()
	go func() { s.watchClock(ctx); close(clocking) }()
	defer func() { cancel(); <-listening; <-watching; <-clocking }()
	t := time.NewTimer(0)
	defer t.Stop()
	var armed time.Time // when t fires
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.shutdown:
			return
		case <-s.kick:
			// A new unit may have an earlier deadline: re-arm only, without
			// reading the store. Nothing can be due yet that was not due at
			// the last sweep.
			if d := s.takeKick(); !d.IsZero() && d.Before(armed) {
				t.Stop()
				t.Reset(max(d.Sub(s.clock.Now()), 0))
				armed = d
			}
			continue
		case <-t.C:
		}
		s.flushLogLimits()
		next := s.sweepInterval
		if full, err := s.expireDue(ctx, ""); full {
			// More may be due: sweep again at once, each batch a write
			// of its own, with the other writes going on between them.
			next = 0
		} else if err == nil {
			// A unit still due right after a sweep could not be ended by
			// it (claimed meanwhile; with PostgreSQL, its row locked by
			// another session, maybe for half a minute): sweeping again at
			// once would spin for as long as that lasts.
			if next = s.nextSweep(ctx); next <= 0 {
				next = min(s.sweepInterval, resweepAfter)
			}
		}
		// Else the store refused the expiry (a full disk, a read-only
		// database): the due units are still due, and sweeping again at
		// once would spin. Try again in a SweepInterval.
		t.Stop()
		t.Reset(next)
		armed = s.clock.Now().Add(next)
	}
}

// sweepFailed logs a store call of the sweeper that failed, unless the
// sweeper is stopping (storeFailure: once a SweepInterval while units are
// due, so bounded as a fault's lines are).
func (s *Server) sweepFailed(ctx context.Context, doing string, err error) {
	if ctx.Err() == nil {
		s.storeFailure(doing, err)
	}
}

// resweepAfter is how long the sweeper waits after a sweep that left a
// unit due.
const resweepAfter = 100 * time.Millisecond

func (s *Server) nextSweep(ctx context.Context) time.Duration {
	mark := s.databaseMark()
	sctx, cancel := s.sweepContext(ctx)
	defer cancel()
	next, ok, err := s.store.WorkNextDeadline(sctx)
	err = s.unanswered(ctx, sctx, err)
	if err != nil {
		s.sweepFailed(ctx, "reading the next deadline", err)
		return s.sweepInterval
	}
	s.databaseAnswered(mark)
	if !ok {
		return s.sweepInterval
	}
	return min(max(next.Sub(s.clock.Now()), 0), s.sweepInterval)
}

// kickSweeper tells the sweeper of a new unit's deadline, so it wakes for it
// if that comes before its next sweep.
func (s *Server) kickSweeper(deadline time.Time) {
	s.kickMu.Lock()
	if s.kickAt.IsZero() || deadline.Before(s.kickAt) {
		s.kickAt = deadline
	}
	s.kickMu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// takeKick returns the earliest deadline kicked since the last call (zero
// when none was).
func (s *Server) takeKick() time.Time {
	s.kickMu.Lock()
	defer s.kickMu.Unlock()
	d := s.kickAt
	s.kickAt = time.Time{}
	return d
}

// expireBatch is the most units one sweep times out, in one write. Units
// fall due together by the thousand (an automator started again after
// minutes down with a queue behind it, an account's queue filled to its cap
// while its proxies were away, a burst of calls with one timeout): all of a
// hundred thousand in one write held SQLite's writer for minutes, every
// other write waiting behind it, and the automator's memory grew by
// gigabytes. The sweeper sweeps again at once after a full batch.
const expireBatch = 256

// expireDue times out the units whose deadline has passed, up to
// expireBatch of them, and wakes their waiting callers. Safe to run from
// several places and replicas at once: the store's expiry is a conditional
// write. A call about one unit past its deadline (its result, a cancel, a
// caller waiting at the deadline) names it in id, so that it ends then
// even behind a backlog of others due before it, which the batch may not
// reach; the sweeper names none.
//
// err is the store's when it failed the expiry (logged already); full
// says that it timed out a whole batch, so more may be due.
func (s *Server) expireDue(ctx context.Context, id string) (full bool, err error) {
	now := s.clock.Now()
	mark, writes := s.databaseMark(), s.writeMark()
	sctx, cancel := s.sweepContext(ctx)
	defer cancel()
	// The reason of a unit no instance claimed says what its account's
	// instances were doing (store.ExpireReason): online as listings count
	// them, from the records every replica writes. Those may be a few
	// seconds (seenEvery) behind an instance's latest poll, which
	// InstanceOnlineWithin allows for.
	expired, err := s.store.WorkExpire(sctx, store.WorkExpireParams{Now: now, Max: expireBatch, ID: id,
		OnlineSince: now.Add(-InstanceOnlineWithin(s.pollWindow)),
		Audit:       &store.AuditEvent{At: now, Kind: store.AuditWorkEnded, Actor: sweeperActor, Detail: "deadline"}})
	err = s.unanswered(ctx, sctx, err)
	if err != nil {
		s.sweepFailed(ctx, "expiring units past their deadline", err)
		return false, err
	}
	s.databaseAnswered(mark)
	// The end of another program's lock (the expiry's transaction took
	// it, though none may be due), or of a full disk (when it wrote), is
	// said within a sweep of it, not at the next unit queued or poll
	// recorded: never on an idle automator (a re-review).
	if len(expired) > 0 {
		s.wrote(writes)
	} else {
		s.lockTaken(writes)
	}
	for _, w := range expired {
		s.emit(ctx, Event{Kind: EventWorkEnded, Account: w.Account, WorkID: w.ID, InstanceID: w.InstanceID, ended: &w})
		s.metrics.WorkFinished(w)
		attrs := []any{"work_id", w.ID, "account", w.Account}
		if w.InstanceID != "" { // no instance claimed it: the reason says why
			attrs = append(attrs, "instance_id", w.InstanceID)
		}
		s.timedOutLog.Log("work timed out", append(attrs, "reason", w.Reason)...)
	}
	return len(expired) >= expireBatch, nil
}

// purgeBatch is how many units one purge write deletes, so that the writes
// queued behind it wait milliseconds, not the whole purge: on a database of
// a million units (a few KiB each), a batch of 100 takes about 10 ms.
const purgeBatch = 100

// PurgeEnded deletes the ended units queued more than retention ago, a
// batch per write (purgePaced), and returns how many it deleted. Units
// still open are kept, however old. A write that deletes the last units an
// account deletion left unfinished had to move ends that deletion, and
// audits it as FinishDeletions does. Then it deletes the previous account
// keys that no unit left can need (purgeKeys).
func (s *Server) PurgeEnded(ctx context.Context, retention time.Duration) (int, error) {
	before := s.clock.Now().Add(-retention)
	total, err := s.purgePaced(ctx, purgeBatch, func() (int, error) {
		return s.store.WorkPurge(ctx, store.WorkPurgeParams{QueuedBefore: before, Max: purgeBatch,
			AuditFinished: func(d store.AccountDeletion) []store.AuditEvent {
				return []store.AuditEvent{store.DeletionPurgedEvent(d, s.clock.Now(), sweeperActor, "")}
			}})
	})
	if total > 0 {
		s.log.Info("deleted ended units past the retention", "count", total, "queued_before", before, "work_retention", retention)
	}
	if err == nil {
		err = s.purgeKeys(ctx)
	}
	return total, err
}

// auditPurgeBatch is how many audit events one purge write deletes: a few
// hundred bytes each, some milliseconds a batch.
const auditPurgeBatch = 1000

// PurgeAudit deletes the audit events stamped more than retention ago,
// oldest first, a batch per write (purgePaced), and returns how many. The
// first write that reaches further than any earlier purge appends an
// audit.purged event saying how far (store.AuditPurge), so the log says
// what it no longer holds.
func (s *Server) PurgeAudit(ctx context.Context, retention time.Duration) (int, error) {
	now := s.clock.Now()
	total, err := s.purgePaced(ctx, auditPurgeBatch, func() (int, error) {
		return s.store.AuditPurge(ctx, store.AuditPurgeParams{Now: now, Retention: retention, Max: auditPurgeBatch,
			Audit: store.AuditEvent{Kind: store.AuditPurged, Actor: sweeperActor, Detail: "audit_retention " + retention.String()}})
	})
	if total > 0 {
		s.log.Info("deleted audit events past the retention", "count", total, "audit_retention", retention)
	}
	return total, err
}

// purgePaced runs write, which deletes at most batch rows, until it
// deletes fewer or fails, and returns how many it deleted in all.
//
// After each full batch it waits as long as the batch took before the
// next: the purge then holds the database at most half the time, and the
// writes of callers and proxies made meanwhile commit on their own, not
// behind the next batch. Batches sent back to back had a first purge of a
// year's history (900,000 units, two minutes) cut the rate of `@ping`
// units twentyfold, with waits of a second.
func (s *Server) purgePaced(ctx context.Context, batch int, write func() (int, error)) (int, error) {
	total := 0
	for {
		start := s.clock.Now()
		n, err := write()
		total += n
		if err == nil && n == batch {
			err = s.purgePause(ctx, max(s.clock.Now().Sub(start), purgePauseMin))
		}
		if err != nil || n < batch {
			return total, err
		}
	}
}

// retiredKeyGrace is how long after a previous key's overlap ended it is
// kept at least, and how long after that a unit queued then keeps it: the
// most that the time an automator stores with a unit sealed with it may lag
// its overlap. A unit is sealed with the current key an enqueue read (a
// copy kept up to a second), and handed sealed again with a previous key
// while a ring read up to keyCacheTTL ago says it is usable (its overlap
// may have been cut short since by a rotation without overlap); the
// clocks of automators and of the host that ran rotate-key may differ too.
const retiredKeyGrace = time.Hour

// purgeKeys deletes the previous keys of every account that no stored unit
// can need any more (store.Store AccountKeysPurge): with them gone, a
// leaked master key no longer opens, from a later copy of the database,
// the units they sealed. A ring cached before holds them until it is read
// again; none of its units needs them.
func (s *Server) purgeKeys(ctx context.Context) error {
	n, err := s.store.AccountKeysPurge(ctx, store.AccountKeysPurgeParams{Now: s.clock.Now(), Grace: retiredKeyGrace})
	if n > 0 {
		s.log.Info("deleted previous account keys no unit needs", "count", n)
	}
	return err
}

// purgePauseMin is the least pause between two purge batches.
const purgePauseMin = time.Millisecond

// pause waits for d, or until ctx is done (its error).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
