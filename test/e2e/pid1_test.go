//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
)

// TestAProxyThatIsItsContainersFirstProcessReapsWhatItsScriptsLeave: a
// container runs `proxy run` as PID 1 of its PID namespace, with no init
// before it (docker run without --init, a Kubernetes pod). What its scripts
// leave (a background job the runner kills once the script has exited, the
// children of a script killed at its deadline) is orphaned to PID 1, which
// alone can end them by waiting for them: none stays a zombie. SIGTERM
// sent to that PID 1 (docker stop) stops the proxy gracefully, and its
// exit code is the container's. A real PID namespace (unshare), real
// scripts, a real automator.
func TestAProxyThatIsItsContainersFirstProcessReapsWhatItsScriptsLeave(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare")
	}
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	a := startAutomator(t)
	cfg := withSettings(t, a.createAccount(t, "acme"), "max_concurrency: 8")
	scripts := t.TempDir()
	writeScript(t, scripts, "background.sh", "sleep 60 &\necho started")
	writeScript(t, scripts, "sleeper.sh", "sleep 60 &\nsleep 60")
	p := proctest.Start(t, "proxy-pid1", unshare, "--fork", "--pid", "--mount-proc",
		bin.proxy, "run", "--config", cfg, "--scripts-dir", scripts, "--instance-id", "c1")
	proctest.WaitPolling(t, p, 15*time.Second)
	kids := childrenOf(p.Pid())
	if len(kids) != 1 {
		t.Fatalf("unshare (pid %d) has children %v, want the namespace's PID 1", p.Pid(), kids)
	}
	first := kids[0]

	for i := range 3 {
		if r := a.Exec("--account", "acme", "--timeout", "20s", "background.sh"); r.Code != 0 || r.Stdout != "started\n" {
			t.Fatalf("run %d of background.sh: %v", i, r)
		}
		if r := a.Exec("--account", "acme", "--timeout", "1s", "sleeper.sh"); r.Code != 124 {
			t.Fatalf("run %d of sleeper.sh with a 1 s timeout: %v, want timed out (124)", i, r)
		}
	}
	// Each run left a sleep the runner killed: ended, and reaped.
	var zombies []int
	if !proctest.Poll(10*time.Second, func() bool {
		zombies = zombiesIn(first)
		return len(zombies) == 0
	}) {
		t.Errorf("zombies whose parent is the namespace's PID 1 (pid %d): %v, want none", first, zombies)
	}

	if err := syscall.Kill(first, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Errorf("the container's exit code after SIGTERM to its PID 1: %d, want 0 (a graceful stop)", code)
	}
	if !strings.Contains(p.Log(), "stopped") {
		t.Errorf("the proxy's log does not say it stopped:\n%s", p.Tail(10))
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	return procsWith(func(ppid int, _ string) bool { return ppid == pid })
}

// zombiesIn lists the zombies whose parent is pid.
func zombiesIn(pid int) []int {
	return procsWith(func(ppid int, state string) bool { return ppid == pid && state == "Z" })
}

// procsWith lists the processes whose parent and state (from
// /proc/PID/stat) match.
func procsWith(match func(ppid int, state string) bool) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, path := range dirs {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state, ppid, …
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		if match(ppid, f[0]) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			out = append(out, pid)
		}
	}
	return out
}
