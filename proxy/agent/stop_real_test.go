package agent_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// stopping is a real automator and an agent of one slot about to be
// stopped while its unit runs forever.sh, which never ends on its own.
type stopping struct {
	caller  automatorv1.AutomatorServiceClient
	state   string // a directory of the test's, for the spool
	started string // forever.sh touches it
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run returns
}

// startStopping starts the agent with o (its client, keys, scripts and
// logger filled in; a spool in the test's directory when spool is set) and
// runs forever.sh on it; it returns once the script runs, with the unit's
// id.
func startStopping(t *testing.T, o agent.Options, spool bool) (*stopping, string) {
	t.Helper()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	s := &stopping{caller: automatorv1.NewAutomatorServiceClient(a.CallerConn(t)), state: t.TempDir(), done: make(chan struct{})}
	s.started = filepath.Join(s.state, "started")
	automatortest.WriteScript(t, scripts, "forever.sh", "echo step1 done; echo step1 warned >&2\ntouch '"+s.started+"'\nexec sleep 600\n")
	o.Client, o.Keys, o.InstanceID, o.ScriptsDir = automatorv1.NewProxyServiceClient(a.ProxyConn(t)), crypto.Keys{a.Key}, "stopping", scripts
	o.MaxConcurrency, o.PollWait, o.BackoffMin, o.BackoffMax = 1, time.Second, time.Millisecond, 5*time.Millisecond
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if spool {
		o.SpoolDir = filepath.Join(s.state, agent.SpoolDirName)
	}
	ag := agent.New(o)
	var ctx context.Context
	ctx, s.cancel = context.WithCancel(context.Background())
	go func() { ag.Run(ctx); close(s.done) }()

	st, err := s.caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "forever.sh"}})
	if err != nil {
		t.Fatal(err)
	}
	automatortest.WaitFor(t, 10*time.Second, "the script to start", func() bool {
		_, err := os.Stat(s.started)
		return err == nil
	})
	return s, st.GetWorkId()
}

// wantFailed checks that unit id failed, its failure saying why.
func (s *stopping) wantFailed(t *testing.T, id, why string) {
	t.Helper()
	got, err := s.caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != automatorv1.State_STATE_FAILED || !strings.Contains(got.GetResult().GetFailure(), why) {
		t.Fatalf("after the proxy stopped the unit is %v (%q, result failure %q); want failed, saying %q",
			got.GetState(), got.GetReason(), got.GetResult().GetFailure(), why)
	}
}

// TestUnitKilledAtTheEndOfTheGracePeriodIsReportedFailed: a proxy with a
// spool that is stopped while a script runs past its grace period kills the
// script and posts the unit's failure before it exits (the automator is
// up), so the caller learns at once that the proxy stopped, instead of the
// result waiting in the spool for a start that may never come and the unit
// timing out. Its log line says the script was killed, not that it could
// not be run: it ran, in part; and its result holds what the script wrote
// until then, and when it started: how far it got (a review: both were
// dropped).
func TestUnitKilledAtTheEndOfTheGracePeriodIsReportedFailed(t *testing.T) {
	t.Parallel()
	var logged logtest.Buffer
	s, id := startStopping(t, agent.Options{GracePeriod: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logged, nil))}, true)
	t.Cleanup(func() {
		s.cancel()
		waittest.Recv(t, s.done, "the agent's Run to return after its context was cancelled")
	})
	s.cancel()
	waittest.Recv(t, s.done, "the stopped agent's Run to return at the end of its grace period")
	s.wantFailed(t, id, "grace period over")
	got, err := s.caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: id})
	if err != nil {
		t.Fatal(err)
	}
	if r := got.GetResult(); string(r.GetStdout()) != "step1 done\n" || string(r.GetStderr()) != "step1 warned\n" || r.GetStartedAt() == nil || r.GetExitCode() != 0 {
		t.Errorf("the failed unit's result holds stdout %q, stderr %q, started_at %v, exit code %d; want what the script wrote before it was killed, when it started, and no exit code",
			r.GetStdout(), r.GetStderr(), r.GetStartedAt(), r.GetExitCode())
	}
	if log := logged.String(); !strings.Contains(log, `msg="the command was killed before it ended; reported failed"`) || strings.Contains(log, "could not run the command") {
		t.Errorf("the log of a script killed at the end of the grace period:\n%s\nwant it said killed, not that it could not run", log)
	}
	if entries, err := os.ReadDir(filepath.Join(s.state, agent.SpoolDirName)); err == nil && len(entries) > 0 {
		t.Fatalf("the spool still holds %d files for a result the automator took", len(entries))
	}
}

// TestASecondStopEndsTheGracePeriod: a proxy stopped while a script runs
// waits for it within the grace period (an hour here); asked to stop again
// (EndGrace), it kills the script at once, posts the unit's failure saying
// so, and returns.
func TestASecondStopEndsTheGracePeriod(t *testing.T) {
	t.Parallel()
	endGrace := make(chan struct{})
	s, id := startStopping(t, agent.Options{GracePeriod: time.Hour, EndGrace: endGrace}, false)
	t.Cleanup(func() {
		s.cancel()
		close(endGrace)
		if !t.Failed() { // else it may wait out its hour
			<-s.done
		}
	})
	s.cancel()
	select {
	case endGrace <- struct{}{}: // taken by Run as it waits in its grace period
	case <-time.After(10 * time.Second):
		t.Fatal("the stopping agent never took the second stop")
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the second stop; it waits out its hour of grace")
	}
	s.wantFailed(t, id, "asked to stop a second time")
}

// TestACancelDuringTheGracePeriodKillsTheScript: a stopping proxy no
// longer asks for work, but its running units are still its own to kill
// when the caller cancels one (DESIGN: "a claimed unit's process is
// killed by its proxy"). It keeps asking, for no units, which of them
// ended, so a cancel made during its grace period (an hour here) kills
// the script at once, and the agent returns without waiting out its hour.
func TestACancelDuringTheGracePeriodKillsTheScript(t *testing.T) {
	t.Parallel()
	s, id := startStopping(t, agent.Options{GracePeriod: time.Hour}, false)
	t.Cleanup(func() {
		s.cancel()
		if !t.Failed() { // else it may wait out its hour
			<-s.done
		}
	})
	s.cancel()
	if _, err := s.caller.Cancel(context.Background(), &automatorv1.CancelRequest{WorkId: id}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stopping agent did not hear of the cancel: its script runs on, and Run waits out its hour of grace")
	}
	got, err := s.caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != automatorv1.State_STATE_CANCELLED {
		t.Errorf("the unit is %v, want cancelled", got.GetState())
	}
}
