//go:build linux

package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/store"
)

// TestServeForgetsReplicasNotHeardFromForAWeek: the heartbeat of a replica
// last seen more than replicaForgetAfter ago leaves the listing once serve
// runs; one seen within it stays.
func TestServeForgetsReplicasNotHeardFromForAWeek(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	st, _ := openDirStore(t, dir)
	now := time.Now()
	for id, seen := range map[string]time.Time{
		"gone-long-ago": now.Add(-replicaForgetAfter - time.Hour),
		"gone-lately":   now.Add(-replicaForgetAfter + time.Hour),
	} {
		if err := st.ReplicaHeartbeat(t.Context(), store.ReplicaHeartbeatParams{
			ReplicaID: id, Hostname: "old-host", Version: "v0.9", StartedAt: seen.Add(-time.Hour), Now: seen,
		}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	s := serveDirInProcess(t, dir)
	automatortest.WaitFor(t, 15*time.Second, "serve to delete the heartbeat of gone-long-ago", func() bool {
		return strings.Contains(s.log.String(), "deleted the heartbeats of replicas")
	})
	out := replicasCLI(t, dir)
	if strings.Contains(out, "gone-long-ago") {
		t.Errorf("a replica last seen more than %v ago is still listed:\n%s", replicaForgetAfter, out)
	}
	if !strings.Contains(out, "gone-lately") {
		t.Errorf("a replica last seen less than %v ago is no longer listed:\n%s", replicaForgetAfter, out)
	}
}
