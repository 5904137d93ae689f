//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// Guarantee 3: an automator crash loses nothing. Two units are claimed and
// running, four are queued, when the automator is SIGKILLed; the running ones
// finish while it is down. After a restart on the same data directory and
// port the proxy posts the two results and claims the four queued units, and
// every unit succeeds, each run exactly once.
func TestAutomatorKillLosesNothing(t *testing.T) {
	t.Parallel()
	const units = 6
	a := startAutomator(t)
	cfg := withSettings(t, a.createAccount(t, "acme"), "max_concurrency: 2")
	scripts, dir := t.TempDir(), t.TempDir()
	runs, release := filepath.Join(dir, "runs.log"), filepath.Join(dir, "release")
	writeScript(t, scripts, "gate.sh", `echo "start $PROXY_WORK_ID $1" >> "$2"
while [ ! -e "$3" ] && [ -d "${3%/*}" ]; do sleep 0.05; done
echo "end $PROXY_WORK_ID $1" >> "$2"
echo "out-$1"`)
	p := startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)

	c := a.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ids := make([]string, units)
	for i := range ids {
		st, err := c.Submit(ctx, &automatorv1.ExecuteRequest{
			Account: "acme",
			Command: &automatorv1.Command{Script: "gate.sh", Args: []string{strconv.Itoa(i), runs, release}},
			Timeout: durationpb.New(60 * time.Second),
		})
		if err != nil {
			t.Fatalf("Submit %d: %v", i, err)
		}
		ids[i] = st.GetWorkId()
	}
	starts := func() []string {
		var s []string
		for _, l := range lines(runs) {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "start" {
				s = append(s, f[1])
			}
		}
		return s
	}
	waitFor(t, 10*time.Second, "two units to start", func() bool { return len(starts()) >= 2 })
	states := map[automatorv1.State]int{}
	for _, id := range ids {
		st, err := c.Get(ctx, &automatorv1.GetRequest{WorkId: id})
		if err != nil {
			t.Fatalf("Get %s: %v", id, err)
		}
		states[st.GetState()]++
	}
	if states[automatorv1.State_STATE_CLAIMED] != 2 || states[automatorv1.State_STATE_QUEUED] != 4 || len(starts()) != 2 {
		t.Fatalf("before the crash: states %v and %d starts; want 2 claimed (running), 4 queued", states, len(starts()))
	}

	a.Kill(t)
	writeFile(t, release, "")
	waitFor(t, 10*time.Second, "the two running scripts to finish while the automator is down", func() bool {
		return strings.Count(strings.Join(lines(runs), "\n"), "end ") >= 2
	})
	a.Restart(t)

	for i, id := range ids {
		st, err := waitWork(ctx, c, id)
		if err != nil {
			t.Errorf("unit %d (%s): Wait: %v", i, id, err)
			continue
		}
		want := fmt.Sprintf("out-%d\n", i)
		if st.GetState() != automatorv1.State_STATE_SUCCEEDED || st.GetResult().GetExitCode() != 0 || string(st.GetResult().GetStdout()) != want {
			t.Errorf("unit %d (%s): state %v reason %q exit %d stdout %q; want SUCCEEDED, exit 0, stdout %q",
				i, id, st.GetState(), st.GetReason(), st.GetResult().GetExitCode(), st.GetResult().GetStdout(), want)
		}
	}
	count := map[string]int{}
	for _, id := range starts() {
		count[id]++
	}
	for _, id := range ids {
		if count[id] != 1 {
			t.Errorf("work %s started %d times, want once", id, count[id])
		}
	}
	if n := len(starts()); n != units {
		t.Errorf("%d starts in the run log, want %d", n, units)
	}
}

// A proxy stopping (SIGTERM) with a unit running waits for it within its
// grace period (an hour here); a second SIGTERM, or Ctrl-C, ends the grace
// period at once: the script is killed, the unit reported failed, and the
// proxy exits 0.
func TestASecondSignalEndsTheGracePeriod(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := withSettings(t, a.createAccount(t, "acme"), "grace_period: 1h")
	scripts, gate := t.TempDir(), t.TempDir()
	started, release := filepath.Join(gate, "started"), filepath.Join(gate, "release")
	writeScript(t, scripts, "wait.sh", `touch "$1"; while [ ! -e "$2" ] && [ -d "${2%/*}" ]; do sleep 0.05; done; echo released`)
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) })
	p := startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)

	bg := a.StartExec(t, "--account", "acme", "wait.sh", started, release)
	waitFor(t, 10*time.Second, "the script to start", func() bool { return exists(started) })
	p.Signal(t, syscall.SIGTERM)
	waitFor(t, 10*time.Second, "the proxy to wait for its running unit", func() bool {
		return strings.Contains(p.Log(), "stopping: waiting for running units")
	})
	p.Signal(t, syscall.SIGINT)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Errorf("the proxy exited with %d after a second signal, want 0", code)
	}
	if !strings.Contains(p.Log(), "asked to stop again: killing running units") {
		t.Errorf("the proxy's log does not say why it killed its unit:\n%s", p.Tail(20))
	}
	if r := bg.Wait(t, 10*time.Second); r.Code != 125 || !strings.Contains(r.Stderr, "asked to stop a second time") {
		t.Errorf("exec: %v; want exit 125 (failed), saying the proxy was asked to stop a second time", r)
	}
}

// A stopping proxy (SIGTERM, like a service stop) lets its running unit
// finish, posts the result, and only then exits 0.
func TestSIGTERMLetsRunningWorkFinish(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	gate := t.TempDir()
	started, release := filepath.Join(gate, "started"), filepath.Join(gate, "release")
	// The script runs until the test releases it: once the proxy says it
	// is stopping, so the unit is still running when SIGTERM comes.
	writeScript(t, scripts, "slow.sh", `echo "$PROXY_WORK_ID" > "$1.tmp" && mv "$1.tmp" "$1"
while [ ! -e "$2" ] && [ -d "${2%/*}" ]; do sleep 0.05; done
echo done`)
	p := startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)

	bg := a.StartExec(t, "--account", "acme", "--timeout", "30s", "slow.sh", started, release)
	waitFor(t, 10*time.Second, "the script to start", func() bool { return exists(started) })
	workID := strings.TrimSpace(lines(started)[0])
	p.Signal(t, syscall.SIGTERM)
	waitFor(t, 10*time.Second, "the proxy to say it waits for its running unit", func() bool {
		return strings.Contains(p.Log(), "stopping: waiting for running units")
	})
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Errorf("the proxy exited with %d after SIGTERM, want 0", code)
	}
	// The proxy is gone: its result must already be recorded.
	c := a.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Get(ctx, &automatorv1.GetRequest{WorkId: workID})
	if err != nil {
		t.Fatalf("Get %s: %v", workID, err)
	}
	if st.GetState() != automatorv1.State_STATE_SUCCEEDED {
		t.Errorf("right after the proxy exited, work %s is %v (%s); want SUCCEEDED: the proxy must post before exiting",
			workID, st.GetState(), st.GetReason())
	}
	if r := bg.Wait(t, 10*time.Second); r.Code != 0 || r.Stdout != "done\n" {
		t.Errorf("exec: %v; want exit 0, stdout \"done\\n\"", r)
	}
}
