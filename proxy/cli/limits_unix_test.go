//go:build unix

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestRunKeepsMaxOutputBytesOfEachStream: `proxy run` with max_output_bytes
// in its file keeps that many bytes of each of stdout and stderr of a
// script and flags them truncated, not the 1 MiB default. A real automator,
// the real `proxy run` and a real script.
func TestRunKeepsMaxOutputBytesOfEachStream(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "loud.sh", `head -c 5000 /dev/zero | tr '\0' o
head -c 5000 /dev/zero | tr '\0' e >&2`)
	st := executeThroughProxyRun(t, a, a.URL(), scripts, "instance_id: limits\nmax_output_bytes: 1024\n", "loud.sh")
	r := st.GetResult()
	if st.GetState() != automatorv1.State_STATE_SUCCEEDED || r == nil {
		t.Fatalf("unit %v (%s), want succeeded with a result", st.GetState(), st.GetReason())
	}
	if len(r.GetStdout()) != 1024 || !r.GetStdoutTruncated() {
		t.Errorf("stdout: %d bytes, truncated %v; want the 1024 of max_output_bytes, truncated", len(r.GetStdout()), r.GetStdoutTruncated())
	}
	if len(r.GetStderr()) != 1024 || !r.GetStderrTruncated() {
		t.Errorf("stderr: %d bytes, truncated %v; want the 1024 of max_output_bytes, truncated", len(r.GetStderr()), r.GetStderrTruncated())
	}
}

// executeThroughProxyRun runs the real `proxy run` in this process with a
// profile of automator a reached at url (a.URL(), or a forwarder's), its
// scripts in scripts and the profile lines extra, executes script once
// through the automator, stops the proxy and returns the unit.
func executeThroughProxyRun(t *testing.T, a *automatortest.Automator, url, scripts, extra, script string) *automatorv1.WorkStatus {
	t.Helper()
	profile := "automator_url: " + url + "\ntoken: " + a.Token + "\nkey: " + a.Key.String() +
		"\nca_cert: |\n  " + strings.ReplaceAll(strings.TrimSpace(string(a.CAPEM)), "\n", "\n  ") +
		"\nscripts_dir: '" + scripts + "'\n" + extra
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- Main(ctx, []string{"run", "--config", path}, Env{Stdout: &bytes.Buffer{}, Stderr: &stderr})
	}()
	defer func() {
		stop()
		if code := waittest.Recv(t, exited, "proxy run to return once its context was cancelled"); code != 0 {
			t.Errorf("proxy run exited %d: %s", code, stderr.String())
		}
	}()

	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	callCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := caller.ExecuteOnProxy(callCtx, &automatorv1.ExecuteRequest{
		Account: a.Account,
		Command: &automatorv1.Command{Script: script},
		Timeout: durationpb.New(time.Minute),
	})
	if err != nil {
		t.Fatalf("ExecuteOnProxy: %v", err)
	}
	return st
}
