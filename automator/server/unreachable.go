package server

import (
	"context"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// An outage of the database fails every call that needs it, and the
// sweeper's every look at the deadlines: one line per failure would bury
// the log (a poll alone fails every few seconds per instance). So the
// first failure of an outage is a warning with its details (the call, its
// account, the error), the next ones debug lines, and the first store call
// that succeeds after it says that the database answers again: as the
// replica's listener and the per-account gauges log their own outages.
//
// Only a call begun after the last failure ends an outage: one that was
// under way when the database went (and got its answer just before) says
// nothing of it now.

// databaseUnreachable logs a store call that found the database out of
// reach: a warning for the first of an outage, debug for the others.
func (s *Server) databaseUnreachable(attrs ...any) {
	s.databaseDown()
	if !s.dbWarned.Swap(true) {
		s.log.Warn("the database is unreachable: calls that need it answer UNAVAILABLE, and units are not timed out, until it answers again; further failures are logged at debug level", attrs...)
		return
	}
	s.log.Debug("the database is unreachable", attrs...)
}

// databaseSilent counts a call's credential lookup that got no answer
// within its bound as the database out of reach, for
// DatabaseUnreachableSince, without the outage's warning: a database that
// is only slow does that too, and the store calls' own errors say when it
// is out of reach.
func (s *Server) databaseSilent(attrs ...any) {
	s.databaseDown()
	s.log.Debug("the database did not answer in time", attrs...)
}

// databaseDown marks the database out of reach from now, unless it is
// already.
func (s *Server) databaseDown() {
	s.dbFailures.Add(1)
	if !s.dbDown.Load() {
		s.dbDownSince.Store(time.Now().UnixNano())
	}
	s.dbDown.Store(true)
}

// DatabaseUnreachableSince is when the store calls began to find the
// database out of reach, in the outage under way; zero when there is none.
func (s *Server) DatabaseUnreachableSince() time.Time {
	if !s.dbDown.Load() {
		return time.Time{}
	}
	return time.Unix(0, s.dbDownSince.Load())
}

// databaseMark is taken before a store call whose success may end an
// outage: see databaseAnswered.
func (s *Server) databaseMark() uint64 { return s.dbFailures.Load() }

// databaseAnswered ends an outage databaseUnreachable logged, saying so
// once, when the store call begun at mark succeeded and no call has failed
// since it began. It costs one atomic load when there is no outage.
func (s *Server) databaseAnswered(mark uint64) {
	if s.dbDown.Load() && s.dbFailures.Load() == mark && s.dbDown.CompareAndSwap(true, false) && s.dbWarned.Swap(false) {
		s.log.Info("the database answers again")
	}
}

// sweepContext is ctx bounded by SweepTimeout, for one store call of the
// sweeper or the deletion watch; the caller calls cancel when the call is
// done.
func (s *Server) sweepContext(ctx context.Context) (sctx context.Context, cancel context.CancelFunc) {
	hook := s.testHookSweepTimeout
	if hook == nil {
		return context.WithTimeout(ctx, s.sweepTimeout)
	}
	sctx, cancelCause := context.WithCancelCause(ctx)
	hook(s.sweepTimeout, func() { cancelCause(context.DeadlineExceeded) })
	return sctx, func() { cancelCause(context.Canceled) }
}

// unanswered is err, from a store call of the sweeper or the deletion
// watch run under sctx (sweepContext: ctx bounded by SweepTimeout), said
// to be the database out of reach when that bound ran out while ctx
// lives: a call on a connection cut off without a word gets no error,
// only silence, and a context's end on its own is not
// store.IsUnavailable.
func (s *Server) unanswered(ctx, sctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && context.Cause(sctx) == context.DeadlineExceeded {
		return fmt.Errorf("%w: no answer within %v: %w", store.ErrUnavailable, s.sweepTimeout, err)
	}
	return err
}
