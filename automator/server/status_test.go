package server_test

import (
	"testing"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
)

// TestAnAccountWithQueuedUnitsAndNoInstanceOnlineIsStrandedEvenIfSomeAreRefused:
// an instance online makes the account online; units queued with none
// online make it stranded, refused instances or not (the units time out);
// with nothing queued, an instance refused for want of a usable key makes
// it refused rather than offline (its proxies are up).
func TestAnAccountWithQueuedUnitsAndNoInstanceOnlineIsStrandedEvenIfSomeAreRefused(t *testing.T) {
	for _, c := range []struct {
		stats store.AccountStats
		want  server.AccountStatus
	}{
		{store.AccountStats{Queued: 1, Instances: 3, InstancesOnline: 1, InstancesRefused: 2}, server.StatusOnline},
		{store.AccountStats{Queued: 1, Instances: 2, InstancesRefused: 2}, server.StatusStranded},
		{store.AccountStats{Queued: 1, Instances: 1}, server.StatusStranded},
		{store.AccountStats{Instances: 2, InstancesRefused: 1}, server.StatusRefused},
		{store.AccountStats{Instances: 2}, server.StatusOffline},
		{store.AccountStats{}, server.StatusNoInstances},
	} {
		if got := server.StatusOf(c.stats); got != c.want {
			t.Errorf("StatusOf(%+v) = %q, want %q", c.stats, got, c.want)
		}
	}
}
