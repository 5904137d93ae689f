package client

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// Command is what a proxy runs: the script named Script from its scripts
// directory, with Args as its argument vector (never through a shell).
// Stdin and environment variables are given with WithStdin and WithEnv.
type Command struct {
	Script string
	Args   []string
}

// State is the lifecycle state of a unit (DESIGN.md):
//
//	queued → claimed → succeeded | failed | timed_out | cancelled
//	queued → timed_out | cancelled
type State string

const (
	StateQueued    State = "queued"
	StateClaimed   State = "claimed"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateTimedOut  State = "timed_out"
	StateCancelled State = "cancelled"
)

// Terminal reports whether s is final.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateTimedOut, StateCancelled:
		return true
	}
	return false
}

// Work is the status of one unit of work.
type Work struct {
	ID      string
	Account string
	State   State
	// Reason explains failed, timed_out and cancelled in plain words.
	Reason string
	// InstanceID is the claimer, once claimed.
	InstanceID string
	// QueuedAt, Deadline, ClaimedAt and FinishedAt are read on the
	// automator's clock, which may differ from this process's.
	QueuedAt   time.Time
	Deadline   time.Time
	ClaimedAt  time.Time // zero until claimed
	FinishedAt time.Time // zero until terminal
	// Result is set when the unit succeeded, or when it failed and the
	// proxy said why.
	Result *Result

	// waitUntil is the deadline on this process's clock (see
	// localDeadline).
	waitUntil time.Time
}

// Result is what the proxy reported for a unit that ran: any exit code is
// a result, not an error.
type Result struct {
	WorkID     string
	InstanceID string // the instance that ran it
	ExitCode   int
	Stdout     []byte
	Stderr     []byte
	// StdoutTruncated and StderrTruncated tell that the proxy's output
	// limit cut the stream.
	StdoutTruncated bool
	StderrTruncated bool
	StartedAt       time.Time
	FinishedAt      time.Time
	// LocalDeadline is set by ExecuteOnProxy with an error that leaves a
	// queued unit's outcome unknown (no automator answering, the API key
	// refused since): the unit's deadline on this process's clock, when
	// known. Past it the unit has ended, or ends as soon as an automator
	// serves: none hands it out or takes its result after it, and its
	// proxy stops its script then.
	LocalDeadline time.Time
}

// Err is nil for a unit that succeeded or has not ended yet, and a
// *WorkError matching ErrFailed, ErrTimeout or ErrCancelled otherwise.
func (w Work) Err() error {
	switch w.State {
	case StateFailed, StateTimedOut, StateCancelled:
		return &WorkError{WorkID: w.ID, Account: w.Account, State: w.State, Reason: w.Reason, InstanceID: w.InstanceID}
	}
	return nil
}

// outcome is ExecuteOnProxy's answer for a terminal unit.
func (w Work) outcome() (Result, error) {
	if err := w.Err(); err != nil {
		r := Result{WorkID: w.ID, InstanceID: w.InstanceID}
		if w.State == StateFailed && w.Result != nil {
			// A script killed before it ended (its proxy stopped, the
			// grace period over) ran in part: what it wrote until then,
			// with no exit code.
			r = *w.Result
			r.WorkID, r.InstanceID, r.ExitCode = w.ID, w.InstanceID, 0
		}
		return r, err
	}
	if w.Result == nil && w.State == StateSucceeded {
		// Told succeeded with no result (an automator of before
		// 2026-12-07 reading a row altered in its database): no exit code
		// to give, and not a success to tell (a review: exit 0).
		return Result{WorkID: w.ID, InstanceID: w.InstanceID}, fmt.Errorf("work %s: %w", w.ID, ErrOutcomeUnknown)
	}
	if !w.State.Terminal() {
		return Result{WorkID: w.ID, InstanceID: w.InstanceID}, fmt.Errorf("work %s is still %s: it has no outcome yet", w.ID, w.State)
	}
	return *w.Result, nil
}

// UnreadableWork returns the unit that err describes when err is the
// refusal of a Get, Wait or Cancel of a unit whose result can no longer be
// read: FAILED_PRECONDITION for a result of an account deleted since (its
// key was destroyed with the account), DATA_LOSS for a stored result that
// does not open (altered in the database). The unit has ended; it comes
// without its Result, with Reason saying so; ok is false for any other
// error.
func UnreadableWork(err error) (w Work, ok bool) {
	s, isStatus := status.FromError(err)
	if !isStatus || (s.Code() != codes.FailedPrecondition && s.Code() != codes.DataLoss) {
		return Work{}, false
	}
	for _, d := range s.Details() {
		if st, isWork := d.(*automatorv1.WorkStatus); isWork && stateFromProto(st.GetState()).Terminal() {
			w = workFromProto(st)
			w.Result = nil
			if w.Reason == "" {
				w.Reason = s.Message()
			} else {
				w.Reason += "; " + s.Message()
			}
			return w, true
		}
	}
	return Work{}, false
}

func workFromProto(st *automatorv1.WorkStatus) Work {
	w := Work{
		ID:         st.GetWorkId(),
		Account:    st.GetAccount(),
		State:      stateFromProto(st.GetState()),
		Reason:     st.GetReason(),
		InstanceID: st.GetInstanceId(),
		QueuedAt:   timeOf(st.GetQueuedAt()),
		Deadline:   timeOf(st.GetDeadline()),
		ClaimedAt:  timeOf(st.GetClaimedAt()),
		FinishedAt: timeOf(st.GetFinishedAt()),
		waitUntil:  localDeadline(st),
	}
	if r := st.GetResult(); r != nil {
		w.Result = &Result{
			WorkID:          w.ID,
			InstanceID:      r.GetInstanceId(),
			ExitCode:        int(r.GetExitCode()),
			Stdout:          r.GetStdout(),
			Stderr:          r.GetStderr(),
			StdoutTruncated: r.GetStdoutTruncated(),
			StderrTruncated: r.GetStderrTruncated(),
			StartedAt:       timeOf(r.GetStartedAt()),
			FinishedAt:      timeOf(r.GetFinishedAt()),
		}
		if w.Result.InstanceID == "" {
			w.Result.InstanceID = w.InstanceID
		}
	}
	return w
}

func stateFromProto(s automatorv1.State) State {
	switch s {
	case automatorv1.State_STATE_QUEUED:
		return StateQueued
	case automatorv1.State_STATE_CLAIMED:
		return StateClaimed
	case automatorv1.State_STATE_SUCCEEDED:
		return StateSucceeded
	case automatorv1.State_STATE_FAILED:
		return StateFailed
	case automatorv1.State_STATE_TIMED_OUT:
		return StateTimedOut
	case automatorv1.State_STATE_CANCELLED:
		return StateCancelled
	}
	return State("unknown")
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// localDeadline is st's deadline on this process's clock: when the answer
// arrived plus the time the unit had left then on the automator's clock
// (one clock, the automator's; its answer's trip makes this a little
// late). An automator that does not say the time left (an older one) has
// its deadline taken as it is.
func localDeadline(st *automatorv1.WorkStatus) time.Time {
	if r := st.GetRemaining(); r != nil {
		return time.Now().Add(r.AsDuration())
	}
	return timeOf(st.GetDeadline())
}
