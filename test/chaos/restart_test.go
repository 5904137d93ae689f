//go:build linux

package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestSpooledResultSurvivesProxyKill: a proxy whose script finished while
// the automator was unreachable (its network black-holed) keeps the
// result in its spool, fsynced. SIGKILLed, then restarted once the network
// is back, it posts the result from the spool, and the caller gets it
// before the deadline; the script ran once.
func TestSpooledResultSurvivesProxyKill(t *testing.T) {
	t.Parallel()
	s := newSmall(t, "127.0.0.1")
	g := newGate(t, s)
	r, err := NewRelay(s.auto.Addr(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	in := newInstance(t, s.dir, "a", s.profile, "https://"+r.Addr(), s.scripts, 4, nil)
	if err := in.StartPolling(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	const timeout = 45 * time.Second
	id := s.submitCommand(t, g.command(s), timeout)
	if started := g.awaitStart(t, 30*time.Second); started != id {
		t.Fatalf("the gate script started for %q, want %q", started, id)
	}

	// The network goes; then the script finishes. Its result cannot be
	// posted, and is spooled first.
	r.Partition(true)
	g.open(t, "done")
	spooled := filepath.Join(in.StateDir, "spool", id+".json")
	proctest.WaitFor(t, 10*time.Second, "the result to be spooled", func() bool { _, err := os.Stat(spooled); return err == nil })
	if st := s.get(t, id); st.GetState() != automatorv1.State_STATE_CLAIMED {
		t.Fatalf("with the network down, unit %s is %v; want CLAIMED (no result arrived)", id, st.GetState())
	}
	if fi, err := os.Stat(spooled); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("spool file %s: %v, mode %v; want 0600", spooled, err, fi.Mode().Perm())
	}

	in.Kill()
	if _, err := os.Stat(spooled); err != nil {
		t.Fatalf("after SIGKILL the spooled result is gone: %v", err)
	}
	r.Partition(false)
	resumed := time.Now()
	if err := in.StartPolling(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	st := s.wait(t, id, timeout)
	if st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != "gate:done\n" || st.GetResult().GetInstanceId() != "a" {
		t.Fatalf("unit %s: %v (%s) stdout %q; want SUCCEEDED with the spooled result \"gate:done\\n\" of instance a",
			id, st.GetState(), st.GetReason(), st.GetResult().GetStdout())
	}
	if !st.GetFinishedAt().AsTime().Before(st.GetDeadline().AsTime()) {
		t.Errorf("the result was accepted at %v, not before the deadline %v", st.GetFinishedAt().AsTime(), st.GetDeadline().AsTime())
	}
	t.Logf("the spooled result was accepted %v after the restart", st.GetFinishedAt().AsTime().Sub(resumed).Round(time.Millisecond))
	// Its own line, wherever it is in its log (gRPC's may follow it).
	if err := await(in.Proc(), in.Proc().Seen("posting results kept in the spool by an earlier run"), 10*time.Second); err != nil {
		t.Errorf("the restarted instance did not say it posts from its spool: %v", err)
	}
	proctest.WaitFor(t, 10*time.Second, "the posted result to leave the spool", func() bool { _, err := os.Stat(spooled); return os.IsNotExist(err) })
	runs := 0
	for _, e := range readExecs(t, s.execLog) {
		if e.WorkID == id {
			runs++
		}
	}
	if runs != 1 {
		t.Errorf("the script of %s ran %d times, want once", id, runs)
	}
}
