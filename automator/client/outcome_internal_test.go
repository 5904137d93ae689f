package client

import (
	"errors"
	"strings"
	"testing"
)

// TestASuccessWithoutAResultIsNotToldAsExitZero: a unit told succeeded
// with no result (an automator of before 2026-12-07 reading a row set to
// succeeded in its database, where a newer one answers DATA_LOSS) is an
// error of ExecuteOnProxy's, not a success with exit code 0; one with its
// result, and a failed unit without one, are told as before.
func TestASuccessWithoutAResultIsNotToldAsExitZero(t *testing.T) {
	t.Parallel()
	if res, err := (Work{ID: "w_1", State: StateSucceeded}).outcome(); !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "w_1: the automator says it succeeded but gave no result") || res.WorkID != "w_1" {
		t.Errorf("succeeded without a result: %+v, %v; want an error saying it gave no result", res, err)
	}
	if res, err := (Work{ID: "w_2", State: StateSucceeded, Result: &Result{ExitCode: 3}}).outcome(); err != nil || res.ExitCode != 3 {
		t.Errorf("succeeded with a result: %+v, %v; want its exit code", res, err)
	}
	if _, err := (Work{ID: "w_3", State: StateFailed}).outcome(); err == nil || strings.Contains(err.Error(), "gave no result") {
		t.Errorf("failed without a result: %v; want its WorkError", err)
	}
	for _, open := range []State{StateQueued, StateClaimed} {
		if _, err := (Work{ID: "w_4", State: open}).outcome(); err == nil || !strings.Contains(err.Error(), "still "+string(open)) {
			t.Errorf("a unit still %s: %v; want an error saying so, not a success", open, err)
		}
	}
}
