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
