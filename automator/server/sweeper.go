package server

import (
	"context"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// Run ends units at their deadlines until ctx is done. It sleeps until the
// earliest deadline (or SweepInterval, whichever comes first, so units
// queued by other replicas are seen) and is kicked awake by new units.
//
// With a Broadcaster it also listens for other replicas' events.
func (s *Server) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	listening := make(chan struct{})
	go func() { s.listen(ctx); close(listening) }()
	defer func() { cancel(); <-listening }()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.shutdown:
			return
		case <-s.kick:
			// A new unit may have an earlier deadline: re-arm only. Nothing
			// can be due yet that was not due at the last sweep.
		case <-t.C:
			s.expireDue(ctx)
		}
		t.Stop()
		t.Reset(s.nextSweep(ctx))
	}
}

func (s *Server) nextSweep(ctx context.Context) time.Duration {
	next, ok, err := s.store.WorkNextDeadline(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("reading the next deadline", "err", err)
		}
		return s.sweepInterval
	}
	if !ok {
		return s.sweepInterval
	}
	return min(max(next.Sub(s.clock.Now()), 0), s.sweepInterval)
}

// kickSweeper makes the sweeper look at the next deadline again.
func (s *Server) kickSweeper() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// expireDue times out every unit whose deadline has passed and wakes its
// waiting callers. Safe to run from several places and replicas at once:
// the store's expiry is a conditional write.
func (s *Server) expireDue(ctx context.Context) {
	now := s.clock.Now()
	expired, err := s.store.WorkExpire(ctx, store.WorkExpireParams{Now: now,
		Audit: &store.AuditEvent{At: now, Kind: store.AuditWorkEnded, Actor: sweeperActor, Detail: "deadline"}})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("expiring units past their deadline", "err", err)
		}
		return
	}
	for _, w := range expired {
		s.emit(ctx, Event{Kind: EventWorkEnded, Account: w.Account, WorkID: w.ID, InstanceID: w.InstanceID})
		s.metrics.WorkFinished(w)
		s.log.Info("work timed out", "work_id", w.ID, "account", w.Account, "instance_id", w.InstanceID, "reason", w.Reason)
	}
}
