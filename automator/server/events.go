package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// Event is a change of the queue that other automator replicas sharing the
// store must hear of, so their long polls and waiting callers wake without
// polling the store.
type Event struct {
	Kind    EventKind
	Account string
	// WorkID is set for EventWorkEnded, but in a Broadcaster's replay of
	// what it may have missed: there one event without it stands for the
	// ends of InstanceID's units (EventResumed wakes their waiters).
	WorkID string
	// InstanceID is the claimer of an ended unit, when it was claimed: its
	// poll is woken to learn of a cancel. For EventRunPolled, the instance
	// that polled.
	InstanceID string
	// RunID is set for EventRunPolled: the proxy run that polled, and
	// PollSeq the number of that poll in the run (0: not numbered).
	RunID   string
	PollSeq int64

	// ended is the unit as it ended, for EventWorkEnded on the replica that
	// ended it: waiting callers here take it instead of reading it again.
	// It is not published.
	ended *store.Work
}

type EventKind int

const (
	// EventWorkQueued: a unit was queued on Account.
	EventWorkQueued EventKind = iota + 1
	// EventWorkEnded: unit WorkID reached a terminal state.
	EventWorkEnded
	// EventRunPolled: run RunID of instance InstanceID polled another
	// replica on a new connection: a poll of that run still waiting here
	// is superseded (hub.poller). Published to the others only.
	EventRunPolled
	// EventResumed: the Broadcaster listens, for the first time or again
	// after a time in which it may have missed events (its connection was
	// lost). Every caller waiting here reads its unit again, and every
	// proxy process's next poll looks at its running units in the store:
	// the Broadcaster's own replay of what it missed may lack an end.
	// Never published.
	EventResumed
)

// Broadcaster carries Events between replicas (for PostgreSQL: NOTIFY and
// LISTEN). A single automator needs none: the in-process hub suffices.
type Broadcaster interface {
	// Publish sends e to every other replica. Best effort: a lost event
	// delays a wake-up until the next poll window, sweep or waiter's
	// recheck (Options.WaitRecheck), never loses work.
	Publish(ctx context.Context, e Event) error
	// Listen calls fn for every event published by any replica (its own
	// included is fine: handling is idempotent) until ctx is done, and
	// with EventResumed once it listens, before any event it hears from
	// then on.
	Listen(ctx context.Context, fn func(Event)) error
}

// apply wakes the local goroutines an event concerns.
func (s *Server) apply(e Event) {
	switch e.Kind {
	case EventWorkQueued:
		s.hub.NotifyWork(e.Account, 1, s.clock.Now())
	case EventWorkEnded:
		s.hub.NotifyDone(e.WorkID, e.ended)
		if e.InstanceID != "" {
			s.hub.NotifyInstance(e.Account, e.InstanceID)
		}
	case EventRunPolled:
		s.hub.supersedeRun(e.Account, e.InstanceID, e.RunID, e.PollSeq)
	case EventResumed:
		s.hub.resumed()
	}
}

// publish sends e to the other replicas only, in the background: a poll
// does not wait for it.
func (s *Server) publish(e Event) {
	if s.broadcaster == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.broadcaster.Publish(ctx, e); err != nil {
			s.log.Warn("publishing a queue event to other replicas", "kind", e.Kind, "err", err)
		}
	}()
}

// mayBeUnannounced reports whether an end made again (a cancel or a result
// whose answer was lost) is worth announcing again: with other replicas,
// while its first announcement, lost if the replica that made it died,
// could still keep someone waiting. Past a waiter's recheck and a poll's
// window every waiter has read its unit again and every poll has looked
// again, and announcing it would only wake the account's polls for
// nothing, as often as a caller repeats the call.
func (s *Server) mayBeUnannounced(w store.Work) bool {
	return s.broadcaster != nil && s.clock.Now().Sub(w.FinishedAt) < max(s.waitRecheck, s.pollWindow)
}

// emit applies e here and publishes it to the other replicas.
func (s *Server) emit(ctx context.Context, e Event) {
	s.apply(e)
	if s.broadcaster == nil {
		return
	}
	if err := s.broadcaster.Publish(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("publishing a queue event to other replicas", "kind", e.Kind, "err", err)
	}
}

// Listening reports whether the automator hears the other replicas' queue
// events: its Broadcaster listens, and has caught up. False without a
// Broadcaster, and while it has not listened yet or reconnects.
func (s *Server) Listening() bool { return s.listening.Load() }

// listen feeds events from other replicas into the hub until ctx is done.
// It logs when it stops listening and when it listens again, not at every
// retry: a database out of reach would log a line every SweepInterval.
func (s *Server) listen(ctx context.Context) {
	if s.broadcaster == nil {
		return
	}
	var failing atomic.Bool
	apply := func(e Event) {
		if e.Kind == EventResumed {
			s.listening.Store(true)
			if failing.Swap(false) {
				s.log.Info("listening for queue events of other replicas again")
			}
		}
		s.apply(e)
	}
	for ctx.Err() == nil {
		err := s.broadcaster.Listen(ctx, apply)
		s.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		if !failing.Swap(true) {
			s.log.Warn("not listening for queue events of other replicas: wake-ups from them wait for a poll window or sweep; retrying", "retry_every", s.sweepInterval, "err", err)
		} else {
			s.log.Debug("listening for queue events of other replicas: retry failed", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.sweepInterval):
		}
	}
}
