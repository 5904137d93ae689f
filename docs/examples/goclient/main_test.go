//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGoExample runs the documented Go example against a real automator
// and proxy: a result, a failure and an unknown account.
func TestGoExample(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	scripts, err := filepath.Abs("../../../deploy/scripts")
	if err != nil {
		t.Fatal(err)
	}
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "docs-go", ScriptsDir: scripts}).WaitPolling(t)
	env := map[string]string{"AUTOMATOR_GRPC": a.URL(), "AUTOMATOR_API_KEY": a.APIKey, "AUTOMATOR_CA": a.CAFile}
	getenv := func(k string) string { return env[k] }
	exec := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, getenv, &out, &errb)
		return code, out.String(), errb.String()
	}

	if code, out, errs := exec("hello.sh", "gopher"); code != 0 || !strings.HasPrefix(out, "hello gopher from instance docs-go") || !strings.Contains(errs, "ran on instance docs-go") {
		t.Errorf("hello.sh: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := exec("exit-code.sh", "7"); code != 7 || !strings.Contains(errs, "exiting with 7") {
		t.Errorf("exit-code.sh 7: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := exec("not-deployed.sh"); code != 125 || !strings.Contains(errs, "failed") {
		t.Errorf("not-deployed.sh: exit %d, stderr %q; want 125", code, errs)
	}
	env["ACCOUNT"] = "nobody"
	if code, _, errs := exec("hello.sh"); code != 255 || !strings.Contains(errs, "NotFound") {
		t.Errorf("unknown account: exit %d, stderr %q; want 255", code, errs)
	}
}

// TestGoExampleQueueFullSaysWhenToRunAgain: refused because the account's
// queue is at its cap, the example exits 255 saying that nothing was
// queued and when to run it again (the automator's RetryInfo, 1 s).
func TestGoExampleQueueFullSaysWhenToRunAgain(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{Limits: server.Limits{MaxQueuedPerAccount: 1}})
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(time.Hour)); err != nil {
		t.Fatalf("the unit that fills the queue: %v", err)
	}
	env := map[string]string{"AUTOMATOR_GRPC": a.URL(), "AUTOMATOR_API_KEY": a.APIKey, "AUTOMATOR_CA": a.CAFile}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"hello.sh"}, func(k string) string { return env[k] }, &out, &errb)
	if code != 255 || !strings.Contains(errb.String(), "nothing was queued: run it again in 1s or later") || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("a full queue: exit %d, stderr %q; want 255 and one line saying when to run it again", code, errb.String())
	}
}

// TestGoExampleExitCodeOutsideAByte: a remote exit code that no process
// here can exit with (a Windows proxy's 259, or a negative NTSTATUS) gives
// 255 and a line saying so, as `automator exec` does, not the code cut to
// its low byte (259 would read as 3).
func TestGoExampleExitCodeOutsideAByte(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	env := map[string]string{"AUTOMATOR_GRPC": a.URL(), "AUTOMATOR_API_KEY": a.APIKey, "AUTOMATOR_CA": a.CAFile}
	api := automatorv1.NewProxyServiceClient(a.ProxyConn(t))
	for _, exit := range []int32{259, -1073741819} {
		type outcome struct {
			code   int
			stderr string
		}
		done := make(chan outcome, 1)
		go func() {
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"windows.cmd"}, func(k string) string { return env[k] }, &out, &errb)
			done <- outcome{code, errb.String()}
		}()
		claim := claimOne(t, api)
		plain, err := proto.Marshal(&automatorv1.Result{ExitCode: exit, InstanceId: "win", StartedAt: timestamppb.Now(), FinishedAt: timestamppb.Now()})
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := crypto.Seal(a.Key, claim.GetAccount(), claim.GetWorkId(), crypto.DirResult, plain)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := api.Complete(context.Background(), &automatorv1.CompleteRequest{
			WorkId: claim.GetWorkId(), ClaimId: claim.GetClaimId(), InstanceId: "win",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: sealed,
		}); err != nil {
			t.Fatal(err)
		}
		o := <-done
		if o.code != 255 || !strings.Contains(o.stderr, fmt.Sprint(exit)) {
			t.Errorf("remote exit code %d: exit %d, stderr %q; want 255 and a line naming %d", exit, o.code, o.stderr, exit)
		}
	}
}

// claimOne polls as instance "win" until it claims one unit.
func claimOne(t *testing.T, api automatorv1.ProxyServiceClient) *automatorv1.Claim {
	t.Helper()
	for range 20 {
		resp, err := api.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "win", MaxUnits: 1})
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if len(resp.GetClaims()) == 1 {
			return resp.GetClaims()[0]
		}
	}
	t.Fatal("no unit to claim after 20 polls")
	return nil
}
