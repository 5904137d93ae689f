package metrics_test

import (
	"sync/atomic"
	"testing"

	"github.com/opsgate/opsgate/automator/metrics"
)

// TestReplicaListeningGaugeSaysWhetherItHearsTheOthers: the gauge reads
// the replica's state at each scrape; without WatchListening (SQLite, one
// automator) it is absent.
func TestReplicaListeningGaugeSaysWhetherItHearsTheOthers(t *testing.T) {
	if fams := scrape(t, metrics.New(metrics.Options{})); fams["automator_replica_listening"] != nil {
		t.Error("automator_replica_listening is served without WatchListening")
	}
	m := metrics.New(metrics.Options{})
	var listening atomic.Bool
	m.WatchListening(listening.Load)
	if v := value(t, scrape(t, m), "automator_replica_listening", nil); v != 0 {
		t.Errorf("automator_replica_listening = %v while not listening, want 0", v)
	}
	listening.Store(true)
	if v := value(t, scrape(t, m), "automator_replica_listening", nil); v != 1 {
		t.Errorf("automator_replica_listening = %v while listening, want 1", v)
	}
}
