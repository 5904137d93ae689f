//go:build linux

package replicas

import (
	"strings"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestReplicasSaysWhichReplicaIDsAreHeld: `automator replicas` on
// PostgreSQL has a HOLDS ID column, from the replica-id locks (pg_locks),
// beside ALIVE, from the heartbeats. A replica that serves holds its id; a
// killed one's session ends and its id is no longer held, while its last
// heartbeat may still be recent; a paused one (SIGSTOP, as a frozen host)
// still holds it. ALIVE stays the last column.
func TestReplicasSaysWhichReplicaIDsAreHeld(t *testing.T) {
	t.Parallel()
	c := newCluster(t, pgtest.DSN(t), 3)
	c.Start(t)
	// holds is the HOLDS ID cell of replica id's row, "" without one.
	holds := func(id string) (string, string) {
		t.Helper()
		code, out, errOut := run(bin.automator, "replicas", "--data-dir", c.Replicas[0].DataDir)
		if code != 0 {
			t.Fatalf("automator replicas: exit %d: %s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !strings.Contains(lines[0], "HOLDS ID") || !strings.HasSuffix(lines[0], "ALIVE") {
			t.Fatalf("automator replicas: header %q, want a HOLDS ID column and ALIVE last", lines[0])
		}
		for _, line := range lines[1:] {
			if f := strings.Fields(line); len(f) > 2 && f[0] == id {
				return f[len(f)-2], out
			}
		}
		return "", out
	}
	for _, r := range c.Replicas {
		if got, out := holds(r.ID); got != "yes" {
			t.Errorf("replica %s serving: HOLDS ID %q, want yes:\n%s", r.ID, got, out)
		}
	}

	killed, paused := c.Replicas[1], c.Replicas[2]
	paused.proc.Signal(t, syscall.SIGSTOP)
	defer paused.proc.Signal(t, syscall.SIGCONT)
	killed.proc.Kill(t)
	// PostgreSQL ends the killed process's session once it sees the
	// socket closed.
	waittest.Until(t, "the killed replica's id to be no longer held", func() bool {
		got, _ := holds(killed.ID)
		return got == "no"
	})
	if got, out := holds(paused.ID); got != "yes" {
		t.Errorf("replica %s paused: HOLDS ID %q, want yes:\n%s", paused.ID, got, out)
	}
	if got, out := holds(c.Replicas[0].ID); got != "yes" {
		t.Errorf("replica %s serving: HOLDS ID %q, want yes:\n%s", c.Replicas[0].ID, got, out)
	}
}
