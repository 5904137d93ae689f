//go:build linux

package chaos

import (
	"slices"
	"testing"
	"time"
)

// TestPlanIsASeedsFunctionAndCoversEveryKind: a seed replays the same
// schedule; both run shapes inject every kind, leave an active instance
// untouched at every fault, and never kill the automator twice at once.
// With replicas (TestChaosPG) the kinds are pgKinds.
func TestPlanIsASeedsFunctionAndCoversEveryKind(t *testing.T) {
	top := topology{always: []string{"p1", "p2", "p3", "pc"}, pair: [2]string{"p4", "sb"}}
	pgTop, pgTop3 := top, top
	pgTop.replicas = []string{"r0", "r1"}
	pgTop3.replicas = []string{"r0", "r1", "r2"}
	for _, rc := range []struct {
		dur time.Duration
		pp  planParams
	}{
		{40 * time.Second, shortPlan},
		{6 * time.Minute, longPlan},
	} {
		for _, top := range []topology{top, pgTop, pgTop3} {
			for seed := uint64(1); seed <= 50; seed++ {
				dur := rc.dur
				if len(top.replicas) > 0 && dur < pgShortDuration {
					dur = pgShortDuration
				}
				a, b := plan(seed, dur, rc.pp, top), plan(seed, dur, rc.pp, top)
				if !slices.EqualFunc(a, b, func(x, y planned) bool { return x.String() == y.String() }) {
					t.Fatalf("seed %d planned two different schedules", seed)
				}
				seen := map[string]bool{}
				for _, p := range a {
					seen[p.Kind] = true
				}
				for _, k := range top.kinds() {
					if !seen[k] {
						t.Errorf("%v, replicas %v, seed %d: no %s planned", rc.dur, top.replicas, seed, k)
					}
				}
				if len(top.replicas) > 0 && (seen[kindAutomatorKill] || !seen[kindReplicaKill]) {
					t.Errorf("%v, seed %d: replicas get automator-kill %v, replica-kill %v; want only replica-kill", rc.dur, seed, seen[kindAutomatorKill], seen[kindReplicaKill])
				}
			}
		}
	}
	if slices.EqualFunc(plan(1, time.Minute, planParams{gap: time.Second, maxPause: time.Second, maxBlackhole: time.Second, recovery: time.Second}, top),
		plan(2, time.Minute, planParams{gap: time.Second, maxPause: time.Second, maxBlackhole: time.Second, recovery: time.Second}, top),
		func(x, y planned) bool { return x.String() == y.String() }) {
		t.Error("seeds 1 and 2 planned the same schedule")
	}
}
