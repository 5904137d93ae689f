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
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// TestUnitKilledAtTheEndOfTheGracePeriodIsReportedFailed: a proxy with a
// spool that is stopped while a script runs past its grace period kills the
// script and posts the unit's failure before it exits (the automator is
// up), so the caller learns at once that the proxy stopped, instead of the
// result waiting in the spool for a start that may never come and the unit
// timing out.
func TestUnitKilledAtTheEndOfTheGracePeriodIsReportedFailed(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	scripts, state := t.TempDir(), t.TempDir()
	started := filepath.Join(state, "started")
	automatortest.WriteScript(t, scripts, "forever.sh", "touch '"+started+"'\nexec sleep 600\n")
	spool := filepath.Join(state, agent.SpoolDirName)

	ag := agent.New(agent.Options{
		Client: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), Keys: crypto.Keys{a.Key}, InstanceID: "stopping",
		ScriptsDir: scripts, MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 50 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		SpoolDir: spool,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ag.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	st, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "forever.sh"}})
	if err != nil {
		t.Fatal(err)
	}
	automatortest.WaitFor(t, 10*time.Second, "the script to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	cancel()
	<-done

	got, err := caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: st.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != automatorv1.State_STATE_FAILED || !strings.Contains(got.GetResult().GetFailure(), "grace period over") {
		t.Fatalf("after the proxy stopped the unit is %v (%q, result failure %q); want failed, saying the grace period was over",
			got.GetState(), got.GetReason(), got.GetResult().GetFailure())
	}
	if entries, err := os.ReadDir(spool); err == nil && len(entries) > 0 {
		t.Fatalf("the spool still holds %d files for a result the automator took", len(entries))
	}
}

// TestASecondStopEndsTheGracePeriod: a proxy stopped while a script runs
// waits for it within the grace period (an hour here); asked to stop again
// (EndGrace), it kills the script at once, posts the unit's failure saying
// so, and returns.
func TestASecondStopEndsTheGracePeriod(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	scripts, state := t.TempDir(), t.TempDir()
	started := filepath.Join(state, "started")
	automatortest.WriteScript(t, scripts, "forever.sh", "touch '"+started+"'\nexec sleep 600\n")

	endGrace := make(chan struct{})
	ag := agent.New(agent.Options{
		Client: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), Keys: crypto.Keys{a.Key}, InstanceID: "stopping",
		ScriptsDir: scripts, MaxConcurrency: 1, PollWait: time.Second, GracePeriod: time.Hour, EndGrace: endGrace,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ag.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		close(endGrace)
		if !t.Failed() { // else it may wait out its hour
			<-done
		}
	})

	st, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "forever.sh"}})
	if err != nil {
		t.Fatal(err)
	}
	automatortest.WaitFor(t, 10*time.Second, "the script to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	cancel()
	select {
	case endGrace <- struct{}{}: // taken by Run as it waits in its grace period
	case <-time.After(10 * time.Second):
		t.Fatal("the stopping agent never took the second stop")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the second stop; it waits out its hour of grace")
	}

	got, err := caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: st.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != automatorv1.State_STATE_FAILED || !strings.Contains(got.GetResult().GetFailure(), "asked to stop a second time") {
		t.Fatalf("after the second stop the unit is %v (%q, result failure %q); want failed, saying the proxy was asked to stop again",
			got.GetState(), got.GetReason(), got.GetResult().GetFailure())
	}
}
