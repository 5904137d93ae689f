package client

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/internal/grpcwire"
)

// The outcomes of a unit that are not a result. ExecuteOnProxy returns a
// *WorkError that matches one of them with errors.Is; errors.As gives the
// work id and the reason.
var (
	// ErrTimeout: the unit's deadline passed before a result arrived.
	ErrTimeout = errors.New("work timed out")
	// ErrFailed: the proxy could not run the command (unknown script, the
	// process could not start, ...).
	ErrFailed = errors.New("the proxy could not run the command")
	// ErrCancelled: the unit was cancelled (by this caller or another).
	ErrCancelled = errors.New("work cancelled")
	// ErrQueueFull: the automator refused a submit because the account
	// has as many units queued as it allows (max_queued_per_account): its
	// proxies do not claim them as fast as they come. Nothing was queued;
	// RetryDelay tells when to submit again (with the same idempotency
	// key). Submit and ExecuteOnProxy do so themselves while the context's
	// deadline leaves time for it (see Submit).
	ErrQueueFull = errors.New("the account's queue is full")
	// ErrOutcomeUnknown: the automator told the unit succeeded but gave
	// no result, as an automator before 2026-12-07 does for a unit whose
	// row was set to succeeded in its database (a newer one answers
	// DATA_LOSS, which UnreadableWork reads). The unit has ended; how is
	// not known.
	ErrOutcomeUnknown = errors.New("the automator says it succeeded but gave no result (its row altered in the database?): its outcome is unknown")
)

// RetryDelay returns how long the automator asked the caller to wait
// before making the call again, when err says so (a ResourceExhausted
// status with a google.rpc.RetryInfo detail; over HTTP, 429 with
// Retry-After): the account's queue at its cap (ErrQueueFull: 1 s, a
// pace rather than a promise), or the failed-authentication budget of the
// caller's address (its API key is wrong: the time until it may fail once
// more). ok is false for any other error, a ResourceExhausted one that
// waiting does not mend (a full disk, a message over the size limit)
// included.
func RetryDelay(err error) (delay time.Duration, ok bool) {
	s, isStatus := status.FromError(err)
	if err == nil || !isStatus || s.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range s.Details() {
		if ri, is := d.(*errdetails.RetryInfo); is && ri.GetRetryDelay().IsValid() {
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

// queueFull reports whether st is the automator's refusal of a unit for
// its account's full queue, which queued nothing, and when to submit again.
func queueFull(st *status.Status) (delay time.Duration, ok bool) {
	if st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	full := false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			full = d.GetReason() == grpcwire.ReasonQueueFull && d.GetDomain() == grpcwire.ErrorDomain
		case *errdetails.RetryInfo:
			if d.GetRetryDelay().IsValid() {
				delay, ok = max(d.GetRetryDelay().AsDuration(), 0), true
			}
		}
	}
	return delay, ok && full
}

// WorkError is a unit that ended failed, timed out or cancelled.
type WorkError struct {
	WorkID  string
	Account string
	// State is StateFailed, StateTimedOut or StateCancelled.
	State State
	// Reason says why, in plain words.
	Reason string
	// InstanceID is the instance that had claimed the unit, if any.
	InstanceID string
	// cause is why the caller stopped waiting, when it did (its context).
	cause error
}

func (e *WorkError) Error() string {
	what := "ended as " + string(e.State)
	switch e.State {
	case StateTimedOut:
		what = "timed out"
	case StateFailed:
		what = "failed"
	case StateCancelled:
		what = "cancelled"
	}
	if e.Reason == "" {
		return fmt.Sprintf("work %s %s", e.WorkID, what)
	}
	return fmt.Sprintf("work %s %s: %s", e.WorkID, what, e.Reason)
}

// Unwrap makes errors.Is match the sentinel of the state, and the context's
// error when the caller's context ended the wait.
func (e *WorkError) Unwrap() []error {
	var errs []error
	switch e.State {
	case StateTimedOut:
		errs = append(errs, ErrTimeout)
	case StateFailed:
		errs = append(errs, ErrFailed)
	case StateCancelled:
		errs = append(errs, ErrCancelled)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

// callError is a failed RPC: it reads as one line naming what was being
// done and the gRPC code, and keeps the status for status.Code and
// status.FromError.
type callError struct {
	doing string
	st    *status.Status
	err   error
}

func (e *callError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.doing, e.st.Code(), e.st.Message())
}

func (e *callError) Unwrap() error { return e.err }

// Is makes errors.Is match ErrQueueFull for the automator's refusal of a
// unit for its account's full queue.
func (e *callError) Is(target error) bool {
	if target != ErrQueueFull {
		return false
	}
	_, full := queueFull(e.st)
	return full
}

// GRPCStatus lets status.FromError and status.Code see the RPC's status.
func (e *callError) GRPCStatus() *status.Status { return e.st }

func wrapCall(doing string, err error) error {
	if st, ok := status.FromError(err); ok {
		return &callError{doing: doing, st: st, err: err}
	}
	return fmt.Errorf("%s: %w", doing, err)
}
