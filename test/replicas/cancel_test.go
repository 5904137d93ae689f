//go:build linux

package replicas

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestCancelOnOneReplicaKillsTheRunOfAnInstancePollingAnother: the caller
// cancels on r1 a unit that an instance polling r0 runs. The cancel reaches
// r0 at once and wakes the instance's poll, which learns of it and kills the
// script, long before its poll window (30s) would have ended.
func TestCancelOnOneReplicaKillsTheRunOfAnInstancePollingAnother(t *testing.T) {
	t.Parallel()
	c := newCluster(t, pgtest.DSN(t), 2)
	c.Start(t)
	profile := c.createAccount(t, "acme")
	scripts := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	writeScript(t, scripts, "long.sh", longScript)
	startProxy(t, proxyConfig(t, profile, c.Replicas[0]), scripts, "pa")
	killAtEnd(t, pidFile)

	callerB := c.callers(t)[1]
	st, err := callerB.Submit(t.Context(), &automatorv1.ExecuteRequest{
		Account: "acme",
		Command: &automatorv1.Command{Script: "long.sh", Args: []string{pidFile}},
		Timeout: durationpb.New(2 * time.Minute),
	})
	if err != nil {
		t.Fatalf("Submit on r1: %v", err)
	}
	var pid int
	if !poll(20*time.Second, func() bool { pid, err = readPID(pidFile); return err == nil }) {
		t.Fatalf("the script did not start within 20s: %v", err)
	}

	cancelled := time.Now()
	if _, err := callerB.Cancel(t.Context(), &automatorv1.CancelRequest{WorkId: st.GetWorkId()}); err != nil {
		t.Fatalf("Cancel on r1: %v", err)
	}
	if !poll(10*time.Second, func() bool { return processGone(pid) }) {
		t.Fatalf("the script (pid %d) still runs 10s after the cancel on the other replica", pid)
	}
	t.Logf("the script was killed %v after the cancel on the other replica", time.Since(cancelled).Round(time.Millisecond))
	final, err := callerB.Wait(t.Context(), &automatorv1.WaitRequest{WorkId: st.GetWorkId()})
	if err != nil || final.GetState() != automatorv1.State_STATE_CANCELLED {
		t.Errorf("Wait after the cancel: %v, %v; want cancelled", final.GetState(), err)
	}
}

// longScript writes its pid to the file its first argument names (whole,
// through a rename), then sleeps a minute in its place: a unit that runs
// until it is killed.
const longScript = `echo $$ > "$1.tmp" && mv "$1.tmp" "$1"
exec sleep 60`

// killAtEnd kills, when the test ends, the script whose pid is in pidFile,
// if one wrote it: a script a failing test left running.
func killAtEnd(t *testing.T, pidFile string) {
	t.Cleanup(func() {
		if pid, err := readPID(pidFile); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// readPID reads a pid a script wrote (atomically, with a rename).
func readPID(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("pid file %s holds %q", path, data)
	}
	return pid, nil
}
