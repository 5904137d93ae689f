//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
)

// One state_dir serves one running proxy. A second proxy started on the
// state_dir of a running one (by mistake: a copy of the service's config
// run by hand, say) exits 1 at once with one line naming the directory and
// the running proxy's pid, writes nothing there, and the first goes on
// serving; so is the service's command line. Once the first is killed (SIGKILL: nothing of its own runs), a
// proxy started on the directory takes it, as a warm standby does.
func TestASecondProxyOnTheSameStateDirIsRefused(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	state := filepath.Join(t.TempDir(), "state")
	cfg := withSettings(t, a.createAccount(t, "acme"), "state_dir: "+state)
	scripts := t.TempDir()
	writeScript(t, scripts, "whoami.sh", `echo "$PROXY_INSTANCE_ID"`)
	first := startProxy(t, cfg, scripts, "first")
	first.WaitPolling(t)

	second := startProxy(t, cfg, scripts, "second")
	waitFor(t, 15*time.Second, "the second proxy to exit (or to poll)", func() bool {
		return second.Exited() || strings.Contains(second.Log(), "connected to the automator; polling")
	})
	if !second.Exited() {
		t.Fatalf("a second proxy runs on the state_dir of a running one:\n%s", second.Tail(10))
	}
	want := fmt.Sprintf("proxy: state_dir %s is held by another running proxy (pid %d): ", state, first.Pid())
	if log := second.Log(); second.ExitCode() != 1 || !strings.HasPrefix(log, want) || strings.Count(log, "\n") != 1 {
		t.Fatalf("the second proxy exited with %d, saying:\n%s\nwant exit 1 and one line beginning %q", second.ExitCode(), log, want)
	}

	// The same for the service's command line, `proxy --service NAME run`.
	svc := proctest.Start(t, "proxy-service", bin.proxy, "--service", "opsgate-e2e-statedir", "run",
		"--config", cfg, "--scripts-dir", scripts, "--instance-id", "service")
	waitFor(t, 15*time.Second, "the service's proxy to exit (or to poll)", func() bool {
		return svc.Exited() || strings.Contains(svc.Log(), "connected to the automator; polling")
	})
	// A service logs the error it ends on once, in its log's format.
	refusal := strings.TrimPrefix(want, "proxy: ")
	if !svc.Exited() || svc.ExitCode() != 1 || strings.Count(svc.Log(), refusal) != 1 {
		t.Fatalf("the service's proxy on the state_dir of a running one: exited %v (code %d), saying:\n%s\nwant exit 1 and the refusal %q logged once",
			svc.Exited(), svc.ExitCode(), svc.Log(), refusal)
	}

	if first.Exited() {
		t.Fatalf("the first proxy exited:\n%s", first.Tail(10))
	}
	if s := readStatus(t, state); s.PID != first.Pid() || s.InstanceID != "first" {
		t.Errorf("status.json after the refusal: %+v; want the first proxy's (pid %d)", s, first.Pid())
	}
	if r := a.Exec("--account", "acme", "--timeout", "30s", "whoami.sh"); r.Code != 0 || r.Stdout != "first\n" {
		t.Fatalf("a unit after the refusal: %v; want it run by the first proxy", r)
	}

	first.Kill(t)
	// Until the automator has seen the dead proxy's poll go, a unit could
	// be handed to it and lost.
	proctest.AwaitNoOpenPolls(t, a.DataDir, "acme", 15*time.Second)
	standby := startProxy(t, cfg, scripts, "standby")
	standby.WaitPolling(t)
	if r := a.Exec("--account", "acme", "--timeout", "30s", "whoami.sh"); r.Code != 0 || r.Stdout != "standby\n" {
		t.Fatalf("a unit after the first proxy was killed: %v; want it run by the one started on its state_dir", r)
	}
	if s := readStatus(t, state); s.PID != standby.Pid() {
		t.Errorf("status.json after the standby started: %+v; want its pid %d", s, standby.Pid())
	}
}

// statusFile is what these tests read of a proxy's status.json.
type statusFile struct {
	InstanceID string `json:"instance_id"`
	PID        int    `json:"pid"`
}

func readStatus(t *testing.T, stateDir string) statusFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(stateDir, "status.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s statusFile
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("status.json: %v: %s", err, data)
	}
	return s
}
