//go:build linux

package replicas

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestASecondReplicaWithTheIDOfARunningOneIsRefused: a replica started with
// the id of one that serves on the same database exits at once, naming the
// id and how to choose another, and leaves the first serving; a replica
// killed, or stopped, is started again under its id without a wait.
func TestASecondReplicaWithTheIDOfARunningOneIsRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, pgtest.DSN(t), 2)
	first, other := c.Replicas[0], c.Replicas[1]
	start := func(r *replica, id string) {
		r.proc = startProc(t, "automator-"+r.ID+"-as-"+id, bin.automator, "serve",
			"--data-dir", r.DataDir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--replica-id", id)
	}
	start(first, "r0")
	if err := first.waitServing(); err != nil {
		t.Fatalf("replica r0: %v", err)
	}

	start(other, "r0")
	if code := other.proc.Wait(t, 30*time.Second); code == 0 {
		t.Fatalf("a second replica with id r0 exited %d, want an error; its log:\n%s", code, other.proc.Log())
	}
	log := other.proc.Log()
	for _, want := range []string{`replica id "r0" is in use`, "--replica-id"} {
		if !strings.Contains(log, want) {
			t.Errorf("the refused replica's message lacks %q:\n%s", want, log)
		}
	}
	if first.proc.Exited() {
		t.Fatalf("the first replica r0 exited: %s", first.proc.Tail(20))
	}

	// Killed, it starts again at once under its id.
	first.proc.Kill(t)
	// What it left in its data directory says where it served.
	if err := os.Remove(filepath.Join(first.DataDir, config.FileServing)); err != nil {
		t.Fatal(err)
	}
	start(first, "r0")
	if err := first.waitServing(); err != nil {
		t.Fatalf("replica r0 restarted after a kill: %v", err)
	}
	// Stopped, too.
	first.proc.Signal(t, syscall.SIGTERM)
	if code := first.proc.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("replica r0 exited %d at SIGTERM", code)
	}
	start(first, "r0")
	if err := first.waitServing(); err != nil {
		t.Fatalf("replica r0 restarted after a stop: %v", err)
	}
}
