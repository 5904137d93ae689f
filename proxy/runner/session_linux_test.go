package runner

import (
	"slices"
	"testing"
	"time"
)

// TestNormalExitOfALongRunKillsEveryLeftover: after a script that ran for
// longer than a quick sweep allows, the sweep looks at every process, and
// finds the same leftovers.
func TestNormalExitOfALongRunKillsEveryLeftover(t *testing.T) {
	// Not parallel: it sets quickSweepRun, which every Run reads.
	defer func(d time.Duration) { quickSweepRun = d }(quickSweepRun)
	quickSweepRun = -1
	checkNormalExitKillsEveryLeftover(t)
}

// TestPidsSinceGoesRoundAtPidMax: the quick sweep looks at the pids handed
// out after the script's, round past pid_max, and at none when they are
// too many.
func TestPidsSinceGoesRoundAtPidMax(t *testing.T) {
	t.Parallel()
	if got := slices.Collect(pidsSince(100, 103, 0)); !slices.Equal(got, []int{101, 102, 103}) {
		t.Errorf("pidsSince(100, 103) = %v, want 101..103", got)
	}
	if got := slices.Collect(pidsSince(100, 100, 0)); len(got) != 0 {
		t.Errorf("pidsSince(100, 100) = %v, want none", got)
	}
	if got := slices.Collect(pidsSince(32765, 2, 32768)); !slices.Equal(got, []int{32766, 32767, 1, 2}) {
		t.Errorf("pidsSince(32765, 2) with pid_max 32768 = %v, want 32766, 32767, 1, 2", got)
	}
	if pidsSince(100, 100+quickSweepPids+1, 0) != nil || pidsSince(30000, 30000-1, 32768) != nil {
		t.Error("pidsSince lists more pids than quickSweepPids")
	}
}
