//go:build linux

package replicas

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAKilledProxysUnitsAreInFlightOnEveryReplicaUntilTheyEnd: on
// PostgreSQL, an instance's in_flight is the units it holds claimed, as
// every replica lists it. A proxy polling r0, killed with SIGKILL while it
// runs two units, shows them on r1 until they time out, then 0 on both; a
// proxy polling r1 that ran a unit to its end shows 0.
func TestAKilledProxysUnitsAreInFlightOnEveryReplicaUntilTheyEnd(t *testing.T) {
	t.Parallel()
	c := newCluster(t, pgtest.DSN(t), 2)
	c.Start(t)
	profile := c.createAccount(t, "acme")
	scripts := t.TempDir()
	runs := filepath.Join(t.TempDir(), "runs.log")
	writeScript(t, scripts, "hold.sh", `echo "$PROXY_WORK_ID $$" >> "$1"
exec sleep 60`)
	writeScript(t, scripts, "quick.sh", `echo done`)
	t.Cleanup(func() { // its reaper kills them; in case it could not
		for _, l := range lines(runs) {
			f := strings.Fields(l)
			if pid, err := strconv.Atoi(f[len(f)-1]); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	callers := c.callers(t)
	ctx := t.Context()
	inFlight := func(on int) map[string]int32 {
		t.Helper()
		list, err := callers[on].ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: "acme"})
		if err != nil {
			t.Fatalf("ListInstances on r%d: %v", on, err)
		}
		out := map[string]int32{}
		for _, in := range list.GetInstances() {
			out[in.GetInstanceId()] = in.GetInFlight()
		}
		return out
	}

	dead := startProxy(t, proxyConfig(t, profile, c.Replicas[0], "max_concurrency: 2"), scripts, "dead")
	var ids []string
	for range 2 {
		st, err := callers[1].Submit(ctx, &automatorv1.ExecuteRequest{Account: "acme",
			Command: &automatorv1.Command{Script: "hold.sh", Args: []string{runs}}, Timeout: durationpb.New(15 * time.Second)})
		if err != nil {
			t.Fatalf("Submit on r1: %v", err)
		}
		ids = append(ids, st.GetWorkId())
	}
	if !poll(20*time.Second, func() bool { return len(lines(runs)) == 2 }) {
		t.Fatalf("both units did not start on dead within 20s: %q", lines(runs))
	}
	dead.Kill(t)

	startProxy(t, proxyConfig(t, profile, c.Replicas[1]), scripts, "idle")
	if st, err := callers[0].ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: "acme",
		Command: &automatorv1.Command{Script: "quick.sh"}, Timeout: durationpb.New(time.Minute)}); err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED {
		t.Fatalf("ExecuteOnProxy quick.sh on r0: %v, %v; want it run by idle", st.GetState(), err)
	}
	if got := inFlight(1); len(got) != 2 || got["dead"] != 2 || got["idle"] != 0 {
		t.Errorf("in flight on r1 while dead's units are claimed: %v; want dead 2, idle 0", got)
	}

	for _, id := range ids {
		if st, err := callers[1].Wait(ctx, &automatorv1.WaitRequest{WorkId: id}); err != nil || st.GetState() != automatorv1.State_STATE_TIMED_OUT {
			t.Fatalf("Wait for %s on r1: %v, %v; want timed out", id, st.GetState(), err)
		}
	}
	for on := range 2 {
		if got := inFlight(on); len(got) != 2 || got["dead"] != 0 || got["idle"] != 0 {
			t.Errorf("in flight on r%d once dead's units timed out: %v; want 0 for both", on, got)
		}
	}
}
