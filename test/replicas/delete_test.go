//go:build linux

package replicas

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAccountDeleteReachesEveryReplica: `account delete`, run against the
// shared database, answers callers waiting on either replica for the
// account's running and queued units (cancelled), and the replica its
// proxy polls refuses the proxy from then on, long before any deadline or
// poll window.
func TestAccountDeleteReachesEveryReplica(t *testing.T) {
	t.Parallel()
	c := newCluster(t, pgtest.DSN(t), 2)
	c.Start(t)
	profile := c.createAccount(t, "acme")
	scripts := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	writeScript(t, scripts, "long.sh", longScript)
	px := startProxy(t, proxyConfig(t, profile, c.Replicas[1], "max_concurrency: 1"), scripts, "pb")
	killAtEnd(t, pidFile)

	callers := c.callers(t)
	submit := func(on int, args ...string) string {
		st, err := callers[on].Submit(t.Context(), &automatorv1.ExecuteRequest{
			Account: "acme", Command: &automatorv1.Command{Script: "long.sh", Args: args}, Timeout: durationpb.New(10 * time.Minute),
		})
		if err != nil {
			t.Fatalf("Submit on r%d: %v", on, err)
		}
		return st.GetWorkId()
	}
	running := submit(0, pidFile)
	if !poll(20*time.Second, func() bool { _, err := readPID(pidFile); return err == nil }) {
		t.Fatal("the script did not start within 20s")
	}
	queued := submit(1, pidFile+"-2")
	type answer struct {
		st  *automatorv1.WorkStatus
		err error
	}
	wait := func(on int, id string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			st, err := callers[on].Wait(context.Background(), &automatorv1.WaitRequest{WorkId: id})
			out <- answer{st, err}
		}()
		return out
	}
	waits := []<-chan answer{wait(0, running), wait(1, running), wait(0, queued), wait(1, queued)}

	if code, out, errOut := run(bin.automator, "account", "delete", "acme", "--data-dir", c.Replicas[0].DataDir); code != 0 || !strings.Contains(out, "units cancelled (queued or claimed): 2\n") {
		t.Fatalf("account delete acme: exit %d\n%s%s", code, out, errOut)
	}
	for _, w := range waits {
		a := waittest.Recv(t, w, "a caller waiting for a unit of the deleted account to be answered")
		if a.err != nil || a.st.GetState() != automatorv1.State_STATE_CANCELLED || !strings.Contains(a.st.GetReason(), `account "acme" was deleted`) {
			t.Errorf("a caller waiting for a unit of the deleted account: %v, %v; want cancelled, saying why", a.st, a.err)
		}
	}
	if !poll(15*time.Second, func() bool { return strings.Contains(px.Log(), "refused this proxy's token") }) {
		t.Error("the proxy of the deleted account, polling r1, was not refused within 15s")
	}
	for i, caller := range callers {
		_, err := caller.Submit(t.Context(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "long.sh"}})
		if status.Code(err) != codes.NotFound {
			t.Errorf("Submit on the deleted account on r%d: %v; want NotFound", i, err)
		}
	}
}
