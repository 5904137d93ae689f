package client

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/status"
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
)

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

// GRPCStatus lets status.FromError and status.Code see the RPC's status.
func (e *callError) GRPCStatus() *status.Status { return e.st }

func wrapCall(doing string, err error) error {
	if st, ok := status.FromError(err); ok {
		return &callError{doing: doing, st: st, err: err}
	}
	return fmt.Errorf("%s: %w", doing, err)
}
