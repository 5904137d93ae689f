package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/opsgate/opsgate/automator/client"
)

// TestAUnitWhoseOutcomeIsUnknownIsNotSaidToStillRun: exec against an
// automator that told a unit succeeded without a result (before
// 2026-12-07, its row altered) says the outcome is unknown, not that the
// ended unit "was queued and may still run" (a re-review); a wait that
// failed otherwise after the unit was queued still says it may.
func TestAUnitWhoseOutcomeIsUnknownIsNotSaidToStillRun(t *testing.T) {
	t.Parallel()
	res := client.Result{WorkID: "w_1"}
	if mayStillRun(res, fmt.Errorf("work w_1: %w", client.ErrOutcomeUnknown)) {
		t.Error("a unit told succeeded without a result: exec says it may still run")
	}
	if !mayStillRun(res, errors.New("waiting for work w_1 (no automator answered; giving up)")) {
		t.Error("a unit whose wait gave up: exec does not say it may still run")
	}
}
