//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// treeNotKilled names where to look when a script's process tree survives.
const treeNotKilled = "the proxy must kill the script's whole process tree " +
	"(proxy/runner: configureCmd must make the script lead its own session and process group, processTree.kill signals the group, killRest the rest of the session)"

// Guarantee 2: with no instance polling, the caller gets the timeout error at
// the deadline, not before and not much later.
func TestTimeoutWithNoProxyEndsAtDeadline(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	a.createAccount(t, "acme")

	r := a.Exec("--account", "acme", "--timeout", "2s", "anything.sh")
	if r.Code != 124 {
		t.Fatalf("exec: %v; want exit 124 (timed out)", r)
	}
	if r.Elapsed < 2*time.Second || r.Elapsed > 4*time.Second {
		t.Errorf("exec took %v; want the 2s deadline (between 2s and 4s)", r.Elapsed)
	}
	if n := strings.Count(r.Stderr, "\n"); n != 1 || !strings.Contains(r.Stderr, "timed out") {
		t.Errorf("stderr %q: want one line saying the work timed out", r.Stderr)
	}
	if r.Stdout != "" {
		t.Errorf("stdout %q, want nothing", r.Stdout)
	}
}

// Guarantee 7: at the deadline the proxy kills the script's whole process
// tree, a background child included.
func TestScriptPastDeadlineIsKilledWithItsChildren(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts, dir := t.TempDir(), t.TempDir()
	childPID, selfPID := filepath.Join(dir, "child.pid"), filepath.Join(dir, "self.pid")
	killPIDFilesAtCleanup(t, childPID, selfPID)
	// exec keeps the pid: the script's own pid is the sleeping process.
	writeScript(t, scripts, "tree.sh", `sleep 300 &
echo $! > "$1.tmp" && mv "$1.tmp" "$1"
echo $$ > "$2.tmp" && mv "$2.tmp" "$2"
exec sleep 300`)
	startProxy(t, cfg, scripts, "a").WaitPolling(t)

	r := a.Exec("--account", "acme", "--timeout", "2s", "tree.sh", childPID, selfPID)
	if r.Code != 124 {
		t.Fatalf("exec: %v; want exit 124 (timed out)", r)
	}
	if !exists(childPID) || !exists(selfPID) {
		t.Fatalf("the script never started (no pid files); exec: %v", r)
	}
	child, self := readPIDs(t, childPID)[0], readPIDs(t, selfPID)[0]
	if !poll(5*time.Second, func() bool { return processGone(child) && processGone(self) }) {
		t.Fatalf("5s after the deadline the script (pid %d, gone=%v) or its background child (pid %d, gone=%v) still runs; %s",
			self, processGone(self), child, processGone(child), treeNotKilled)
	}
}

// Guarantee 7 when the proxy itself dies (SIGKILL, a crash, the OOM
// killer) while a script runs: its reaper kills the script's whole tree, a
// child under timeout(1) (a group of its own) included, rather than leave
// it running past its deadline, and says so in the proxy's log.
func TestScriptOfAKilledProxyIsKilledWithItsChildren(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts, dir := t.TempDir(), t.TempDir()
	pids := filepath.Join(dir, "pids")
	killPIDFilesAtCleanup(t, pids)
	// It reads its stdin first, which the proxy feeds once the script is
	// registered with its reaper: the proxy killed the moment the pid
	// file appears is then not killed between the script's start and its
	// registration, a window a loaded machine once stretched past the
	// script's first steps.
	writeScript(t, scripts, "tree.sh", `read -r go
sleep 300 &
child=$!
timeout 300 sleep 300 &
echo $$ $child $! > "$1.tmp" && mv "$1.tmp" "$1"
wait`)
	p := startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)
	stdin := filepath.Join(dir, "stdin")
	if err := os.WriteFile(stdin, []byte("go\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	a.StartExec(t, "--account", "acme", "--timeout", "60s", "--stdin", stdin, "tree.sh", pids)
	waitFor(t, 10*time.Second, "the script to start", func() bool { return exists(pids) })
	tree := readPIDs(t, pids)
	if len(tree) != 3 {
		t.Fatalf("pid file holds %v, want the script, its child and timeout(1)", tree)
	}
	// timeout(1)'s own child is not in the file: its group is.
	t.Cleanup(func() { _ = syscall.Kill(-tree[2], syscall.SIGKILL) })
	p.Kill(t)
	if !poll(10*time.Second, func() bool { return allGone(tree) }) {
		t.Fatalf("10s after its proxy was SIGKILLed, the script's tree (script, child, child under timeout: %v) still runs; "+
			"the proxy's reaper (proxy/runner, ServeReaper) must kill it", tree)
	}
	waitFor(t, 10*time.Second, "the reaper to say so in the proxy's log", func() bool {
		return strings.Contains(p.Log(), "its reaper killed the process trees of their sessions\" instance_id=a reaper_pid=") &&
			strings.Contains(p.Log(), " sessions=["+strconv.Itoa(tree[0])+"] work_ids=[w_")
	})
}

// Guarantees 1 and 2: when the claimer dies, the unit is not handed to the
// other instance; the caller gets the timeout at the deadline.
//
// The test kills the claimer's script too (by pid), as a host death would:
// what matters is that no one posts a result and that the surviving instance
// never gets the claim. A surviving orphan script would not change what the
// automator sees, and would only leak a process.
func TestClaimerDeathEndsInTimeoutAtDeadlineAndIsNeverRerun(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	runs := filepath.Join(t.TempDir(), "runs.log")
	killPIDFilesAtCleanup(t, runs) // the pid is the last field of each line
	writeScript(t, scripts, "hold.sh", `echo "$PROXY_WORK_ID $PROXY_INSTANCE_ID $$" >> "$1"
exec sleep 60`)
	proxies := map[string]*proxy{
		"a": startProxy(t, cfg, scripts, "a"),
		"b": startProxy(t, cfg, scripts, "b"),
	}
	for _, p := range proxies {
		p.WaitPolling(t)
	}

	bg := a.StartExec(t, "--account", "acme", "--timeout", "4s", "hold.sh", runs)
	waitFor(t, 10*time.Second, "the script to start", func() bool { return len(lines(runs)) > 0 })
	f := strings.Fields(lines(runs)[0])
	if len(f) != 3 || proxies[f[1]] == nil {
		t.Fatalf("run log line %q: want \"WORK_ID a|b PID\"", lines(runs)[0])
	}
	claimer := proxies[f[1]]
	pid, _ := strconv.Atoi(f[2])
	claimer.Kill(t)
	if pid > 1 {
		_ = syscall.Kill(pid, syscall.SIGKILL) // the host died with it
	}

	r := bg.Wait(t, 15*time.Second)
	if r.Code != 124 {
		t.Fatalf("exec: %v; want exit 124 (timed out)", r)
	}
	if r.Elapsed < 4*time.Second || r.Elapsed > 6*time.Second {
		t.Errorf("exec took %v; want the 4s deadline (between 4s and 6s)", r.Elapsed)
	}
	if !strings.Contains(r.Stderr, "claimed by instance "+claimer.InstanceID) {
		t.Errorf("stderr %q: want the reason to name the dead claimer %q", r.Stderr, claimer.InstanceID)
	}
	if got := lines(runs); len(got) != 1 {
		t.Errorf("the unit ran %d times, want once:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// Guarantee 2: a unit whose caller gives no timeout has its deadline five
// minutes after it was queued, on the automator's clock.
func TestDefaultTimeoutIsFiveMinutes(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	a.createAccount(t, "acme")
	c := a.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sub, err := c.Submit(ctx, &automatorv1.ExecuteRequest{
		Account: "acme",
		Command: &automatorv1.Command{Script: "anything.sh"},
	})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	st, err := c.Get(ctx, &automatorv1.GetRequest{WorkId: sub.GetWorkId()})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if st.GetState() != automatorv1.State_STATE_QUEUED {
		t.Errorf("state %v, want QUEUED", st.GetState())
	}
	got := st.GetDeadline().AsTime().Sub(st.GetQueuedAt().AsTime())
	if got != 5*time.Minute {
		t.Errorf("deadline - queued_at = %v, want exactly 5m", got)
	}
	if sg := sub.GetDeadline().AsTime().Sub(sub.GetQueuedAt().AsTime()); sg != got {
		t.Errorf("Submit said deadline - queued_at = %v, Get says %v", sg, got)
	}
}
