//go:build linux

package service

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	psvc "github.com/opsgate/opsgate/proxy/service"
)

// standby is instance B of the warm-standby test: an installed, stopped
// service when run as root, otherwise a configured process not started.
type standby struct {
	start func(t *testing.T)
}

// TestWarmStandbyTakesOverWhenTheActiveInstanceDies: instance A runs; B is
// installed, configured and stopped (not even started at boot); A dies
// (SIGKILL) while running a unit; units queue; B is started and runs them.
// No unit runs twice: the one A was running is not handed to B, it ends in
// a timeout at its deadline.
func TestWarmStandbyTakesOverWhenTheActiveInstanceDies(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	c := a.Client(t)
	w := newWorkDir(t)
	profile := a.profile(t, "acme")
	cfgA := w.config(t, profile, "active", "instance_id: active-a")
	cfgB := w.config(t, profile, "standby", "instance_id: standby-b")

	// A: the active instance.
	pa := startProc(t, "proxy-a", bin.proxy, "run", "--config", cfgA)
	waitFor(t, 15*time.Second, "instance A to poll", func() bool {
		return strings.Contains(pa.Log(), "connected to the automator; polling") || pa.Exited()
	})
	if r := a.Exec("--account", "acme", "--timeout", "60s", "record.sh", w.trace, "before"); r.Code != 0 || !strings.Contains(r.Stdout, "on active-a") {
		t.Fatalf("exec before the failover: %v", r)
	}

	// B: installed and stopped.
	b := newStandby(t, cfgB)

	// A claims a slow unit, then dies.
	slow := submit(t, c, "acme", 6*time.Second, "slow.sh", w.dir)
	waitFor(t, 30*time.Second, "A to run the slow unit", func() bool {
		_, err := os.Stat(filepath.Join(w.dir, "trace", "slow.started"))
		return err == nil
	})
	pa.Kill(t)
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(w.dir, "trace", "release"), nil, 0o644) })
	// Until the automator has seen A's connection go, a unit could be
	// handed to A's parked poll and lost with it (as any claim whose answer
	// never arrives).
	proctest.AwaitNoOpenPolls(t, a.DataDir, "acme", 15*time.Second)

	// Units queue: nobody polls.
	var queued []string
	for i := range 5 {
		queued = append(queued, submit(t, c, "acme", 2*time.Minute, "record.sh", w.trace, fmt.Sprintf("failover-%d", i)))
	}
	for _, id := range queued {
		if ws := get(t, c, id); ws.GetState() != automatorv1.State_STATE_QUEUED {
			t.Fatalf("unit %s with A dead and B stopped: %v, want queued", id, ws)
		}
	}

	// Failover: start B. It runs every queued unit.
	b.start(t)
	for _, id := range queued {
		ws := wait(t, c, id, time.Minute)
		if ws.GetState() != automatorv1.State_STATE_SUCCEEDED || ws.GetInstanceId() != "standby-b" {
			t.Errorf("queued unit %s after the failover: %v, want succeeded on standby-b", id, ws)
		}
	}
	// The unit A was running is A's for good: it times out, B never runs it.
	if ws := wait(t, c, slow, time.Minute); ws.GetState() != automatorv1.State_STATE_TIMED_OUT || ws.GetInstanceId() != "active-a" {
		t.Errorf("the unit A died running: %v, want timed out, claimed by active-a", ws)
	}
	if r := a.Exec("--account", "acme", "--timeout", "60s", "record.sh", w.trace, "after"); r.Code != 0 || !strings.Contains(r.Stdout, "on standby-b") {
		t.Fatalf("exec after the failover: %v", r)
	}

	// No unit ran twice.
	runs := w.runs()
	seen := map[string]int{}
	for _, r := range runs {
		seen[r[0]]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("unit %s ran %d times", id, n)
		}
	}
	if len(runs) != 8 {
		t.Errorf("trace %q: want 8 runs (before, slow, 5 queued, after)", runs)
	}
	if r := w.runsOf(slow); len(r) != 1 || r[0][1] != "active-a" {
		t.Errorf("runs of the unit A died running: %q, want one, on active-a", r)
	}
}

// newStandby prepares instance B. As root it is an installed service,
// stopped and not started at boot, as the warm-standby runbook has it;
// otherwise a config that is simply not started yet.
func newStandby(t *testing.T, cfg string) *standby {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: the standby is a configured `proxy run` started at failover, not an installed service")
		return &standby{start: func(t *testing.T) {
			startProc(t, "proxy-b", bin.proxy, "run", "--config", cfg)
		}}
	}
	name := uniqueName(t)
	install(t, name, cfg, "--manual-start")
	status := proxyCLI(t, "status", "--name", name)
	for _, want := range []string{"running:        no", "starts at boot: no", "(valid: instance standby-b", "=> stopped but configured"} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the standby lacks %q:\n%s", want, status)
		}
	}
	return &standby{start: func(t *testing.T) {
		t.Helper()
		proxyCLI(t, "start", "--name", name)
	}}
}

// TestStatusOfAStoppedStandbySaysWhenItsProfileWentStale: a warm standby
// is installed and stopped; its account's token is then rotated, later
// the account deleted. `proxy status` on the standby says so at once, not
// at failover: it asks the automator with the service's config (over TLS,
// with its CA and token), and without showing the standby as an instance
// of the account. Its exit code stays 0 (the service is installed).
func TestStatusOfAStoppedStandbySaysWhenItsProfileWentStale(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "standby", "instance_id: standby-b")
	name := uniqueName(t)
	install(t, name, cfg, "--manual-start")

	status := proxyCLI(t, "status", "--name", name)
	for _, want := range []string{"running:        no", "automator:      reached https://127.0.0.1:", "token accepted, current key 1 held", "=> stopped but configured (a warm standby)",
		"scripts:        2 runnable in " + w.scripts + ", digest "} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the standby with the current profile lacks %q:\n%s", want, status)
		}
	}
	if strings.Contains(status, "may change what this proxy runs") {
		t.Errorf("status of the standby whose scripts only root may write warns of them:\n%s", status)
	}
	// A scripts directory every user may write: said, not refused.
	if err := os.Chmod(w.scripts, 0o777); err != nil {
		t.Fatal(err)
	}
	status = proxyCLI(t, "status", "--name", name)
	if want := "scripts:        users other than the scripts' owners may change what this proxy runs, as its user: keep scripts_dir, the directories above it, its scripts and the interpreters their #! lines name writable by their owner (root) only: " + w.scripts + ": writable by every user"; !strings.Contains(status, want) {
		t.Errorf("status of the standby whose scripts directory every user may write lacks %q:\n%s", want, status)
	}
	if err := os.Chmod(w.scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	// A script whose interpreter this host lacks: a standby that would
	// fail its units does not look healthy (a review).
	if strings.Contains(status, "interpreter this host does not have") {
		t.Errorf("status of the standby whose scripts' interpreters exist warns of them:\n%s", status)
	}
	py := filepath.Join(w.scripts, "py.sh")
	if err := os.WriteFile(py, []byte("#!/usr/bin/nonexistent-python9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	status = proxyCLI(t, "status", "--name", name)
	if want := "scripts:        scripts whose #! interpreter this host does not have: a unit naming one fails on this instance; install the interpreter, or fix the #! line: py.sh (#!/usr/bin/nonexistent-python9)"; !strings.Contains(status, want) {
		t.Errorf("status of the standby with a script whose interpreter is missing lacks %q:\n%s", want, status)
	}
	if err := os.Remove(py); err != nil {
		t.Fatal(err)
	}

	if r := runCLI(bin.automator, "account", "rotate-token", "acme", "--data-dir", a.DataDir, "--overlap", "1h"); r.Code != 0 {
		t.Fatalf("rotate-token: %v", r)
	}
	status = proxyCLI(t, "status", "--name", name)
	// It still works until then: it is not said to claim nothing.
	for _, want := range []string{"its token is a previous one, refused from ", "=> stopped, and its config is out of date (automator: above): started, it may claim units only until the rotation's overlap ends"} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the standby after a rotate-token with an overlap lacks %q:\n%s", want, status)
		}
	}

	if r := runCLI(bin.automator, "instances", "--account", "acme", "--data-dir", a.DataDir); r.Code != 0 || strings.Contains(r.Stdout, "standby-b") {
		t.Errorf("instances after the standby's status was checked: %v, want standby-b not listed (a check is no poll)", r)
	}

	if r := runCLI(bin.automator, "account", "delete", "acme", "--data-dir", a.DataDir); r.Code != 0 {
		t.Fatalf("account delete: %v", r)
	}
	status = proxyCLI(t, "status", "--name", name)
	for _, want := range []string{"token refused", "=> stopped, and its config is out of date (automator: above): started, it would claim nothing;"} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the standby after its account was deleted lacks %q:\n%s", want, status)
		}
	}
}

// TestStatusSaysWhichEnvironmentItsCheckUsed: status's automator check
// dials with the shell's web-proxy variables, while the service reads its
// own from /etc/default/NAME. Here the shell has none and reaches the
// automator directly, while the service's file sends it through a web
// proxy: status says the check used the shell's settings, and what the
// service's file sets, so "reached" is not taken for the service's way out;
// and, the automator being on loopback, that the service's web proxy is not
// used for it either (no one proxies a loopback address).
func TestStatusSaysWhichEnvironmentItsCheckUsed(t *testing.T) {
	// Not parallel: it clears this process's proxy variables (t.Setenv).
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "standby", "instance_id: standby-env")
	name := uniqueName(t)
	install(t, name, cfg, "--manual-start")
	envFile := psvc.EnvironmentFile(name)
	if err := os.WriteFile(envFile, []byte("HTTPS_PROXY=http://webproxy.invalid:3128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(envFile) })
	for _, v := range []string{"HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"} {
		t.Setenv(v, "")
	}

	status := proxyCLI(t, "status", "--name", name)
	want := "check env:      this shell's (no HTTPS_PROXY: direct), not the service's: it reads " + envFile + ", which sets HTTPS_PROXY: 127.0.0.1:"
	_, line, _ := strings.Cut(status, want)
	line, _, _ = strings.Cut(line, "\n")
	if !strings.Contains(status, "automator:      reached https://127.0.0.1:") || !strings.Contains(status, want) ||
		!strings.HasSuffix(line, " directly: a loopback address is never proxied") {
		t.Errorf("status lacks the check reached directly and %q..., the loopback address reached directly:\n%s", want, status)
	}
}

// TestStatusOfARunningProxyWhoseTokenIsRefusedIsNotActive: a running
// service polls; its account is then deleted. `proxy status` run at once,
// while the last successful poll is still recent, does not call it active
// and polling: the automator refuses its token now, so it polls nothing.
func TestStatusOfARunningProxyWhoseTokenIsRefusedIsNotActive(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "refused", "instance_id: refused-a")
	name := uniqueName(t)
	// Run after the uninstall of install's cleanup, which leaves the spool
	// of the polls a stop could not report to an automator refusing the
	// token.
	t.Cleanup(func() { _ = os.RemoveAll(psvc.StateDir(name)) })
	install(t, name, cfg)
	proxyCLI(t, "start", "--name", name)
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "=> active: running and polling the automator") {
		t.Fatalf("status of the running proxy lacks its active line:\n%s", status)
	}

	if r := runCLI(bin.automator, "account", "delete", "acme", "--data-dir", a.DataDir); r.Code != 0 {
		t.Fatalf("account delete: %v", r)
	}
	status := proxyCLI(t, "status", "--name", name)
	if strings.Contains(status, "=> active") {
		t.Errorf("status of the running proxy whose token is refused says it is active:\n%s", status)
	}
	for _, want := range []string{"token refused", "=> running, but the automator refuses its config now", "=> its config is out of date"} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the running proxy whose account was deleted lacks %q:\n%s", want, status)
		}
	}
}

// TestStatusOfARestartedProxyThatHasNotPolledSinceIsNotActive: a service
// polls, is stopped, and is started again while its automator is down. Its
// status file keeps the earlier run's last poll, seconds old: `proxy
// status` does not take it for this run's and call the proxy active and
// polling, it says that this run has not polled yet. Once the automator is
// back and the run has polled, it is active.
func TestStatusOfARestartedProxyThatHasNotPolledSinceIsNotActive(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "restarted", "instance_id: restarted-a")
	name := uniqueName(t)
	// Run after the uninstall of install's cleanup: the restarted automator
	// is stopped before it, so the service's last stop may leave a spool.
	t.Cleanup(func() { _ = os.RemoveAll(psvc.StateDir(name)) })
	install(t, name, cfg)
	proxyCLI(t, "start", "--name", name)
	proxyCLI(t, "stop", "--name", name)
	first, err := readState(name)
	if err != nil || first.LastPoll.IsZero() {
		t.Fatalf("the service's status file after its first run: %+v, %v; want a poll recorded", first, err)
	}

	a.proc.Kill(t)
	started := time.Now()
	proxyCLI(t, "start", "--name", name)
	status := proxyCLI(t, "status", "--name", name)
	if strings.Contains(status, "=> active") || !strings.Contains(status, "and not polled the automator successfully yet") {
		t.Errorf("status of the service started again while its automator is down (its last poll, of the run before, at %s): want it not active, not polled yet:\n%s",
			first.LastPoll.Format(time.RFC3339Nano), status)
	}

	if err := a.serve(t); err != nil {
		t.Fatal(err)
	}
	waitPolled(t, name, started, first.PID)
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "=> active: running and polling the automator") {
		t.Errorf("status once the service has polled the automator back: want it active:\n%s", status)
	}
}

// TestStatusRunByAUserWhoCannotReadTheConfigSaysItWasNotChecked: `proxy
// status` of a stopped standby run by a user who may not read its config
// (mode 0600, root's) checks neither the config nor the automator's answer.
// Its last line says so, not that the config needs attention: nothing is
// wrong with it.
func TestStatusRunByAUserWhoCannotReadTheConfigSaysItWasNotChecked(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	u := requireNobody(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "unread", "instance_id: unread-a")
	name := uniqueName(t)
	install(t, name, cfg, "--manual-start")
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "=> stopped but configured (a warm standby)") {
		t.Fatalf("status as root of the stopped standby: want it a warm standby:\n%s", status)
	}

	// The binary where nobody may run it (the test binaries' directory may
	// be private).
	exe := filepath.Join(w.dir, "proxy")
	data, err := os.ReadFile(bin.proxy)
	if err != nil {
		t.Fatal(err)
	}
	proctest.WriteExecutable(t, exe, data)
	var stdout, stderr strings.Builder
	cmd := exec.Command(exe, "status", "--name", name)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}}
	if err := cmd.Run(); err != nil {
		t.Fatalf("status as nobody: %v; stderr: %s", err, stderr.String())
	}
	status := stdout.String()
	for _, want := range []string{"(not readable by this user; run as root to check it)", "=> stopped; its config is not checked, as this user cannot read it"} {
		if !strings.Contains(status, want) {
			t.Errorf("status as nobody lacks %q:\n%s", want, status)
		}
	}
	if strings.Contains(status, "needs attention") {
		t.Errorf("status as nobody says the config it could not read needs attention:\n%s", status)
	}
	// A start it may not make says who may (a review: the init script's
	// "Permission denied" on a pid lock file, alone).
	stderr.Reset()
	start := exec.Command(exe, "start", "--name", name)
	start.Stderr = &stderr
	start.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}}
	if err := start.Run(); err == nil || !strings.Contains(stderr.String(), "(this user may not change services: run it as root)") {
		t.Errorf("start as nobody: %v, stderr %q; want it refused, saying to run it as root", err, stderr.String())
	}
}

// TestStatusSaysARunningProxyHasNotReadItsChangedConfig: a running service
// gets a new profile merged into its config, as install-proxy.md's "Install
// a new profile" does it. The running proxy still polls with the config it
// read at its start, so `proxy status`, which checks the file, says that
// the file changed after the proxy read it and that a restart applies it;
// after `proxy stop` and `proxy start` it says so no more.
func TestStatusSaysARunningProxyHasNotReadItsChangedConfig(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "changed", "instance_id: changed-a")
	name := uniqueName(t)
	install(t, name, cfg)
	proxyCLI(t, "start", "--name", name)
	const changed = "=> the config file changed after the running proxy read it"
	status := proxyCLI(t, "status", "--name", name)
	if !strings.Contains(status, "=> active: running and polling the automator") || strings.Contains(status, changed) {
		t.Fatalf("status of the service just started: want it active, without %q:\n%s", changed, status)
	}

	r := runCLI(bin.automator, "account", "rotate-token", "acme", "--data-dir", a.DataDir, "--overlap", "1h")
	if r.Code != 0 {
		t.Fatalf("rotate-token: %v", r)
	}
	// The new profile, then what follows the profile in the service's
	// copy (the sed of install-proxy.md), written over the copy.
	installed := filepath.Join(psvc.ConfigDir(name), "proxy.yaml")
	data, err := os.ReadFile(installed)
	if err != nil {
		t.Fatal(err)
	}
	const last = "\n# max_concurrency:"
	i := strings.Index(string(data), last)
	if i < 0 {
		t.Fatalf("the service's config has no line %q:\n%s", last[1:], data)
	}
	rest := string(data)[i+1:]
	rest = rest[strings.Index(rest, "\n")+1:]
	if err := os.WriteFile(installed, []byte(r.Stdout+rest), 0o600); err != nil {
		t.Fatal(err)
	}

	status = proxyCLI(t, "status", "--name", name)
	for _, want := range []string{"token accepted", changed + " (at its start, ", "restart the service to apply it (`proxy stop --name " + name + "`, `proxy start --name " + name + "`)"} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the running service whose config was replaced lacks %q:\n%s", want, status)
		}
	}

	proxyCLI(t, "stop", "--name", name)
	proxyCLI(t, "start", "--name", name)
	status = proxyCLI(t, "status", "--name", name)
	if !strings.Contains(status, "=> active: running and polling the automator") || strings.Contains(status, changed) {
		t.Errorf("status after the restart: want it active, without %q:\n%s", changed, status)
	}
}

// TestStatusOfAServiceWhoseLastRunDiedSaysSo: a service installed to run
// (started at boot, not a standby) whose supervisor and proxy are killed
// (SIGKILL: what a crash or an OOM kill leaves) is not running, and its
// status file's last run never stopped. `proxy status` says that run
// ended without a stop, and does not call the service a warm standby.
// Started again and stopped gracefully, it says neither.
func TestStatusOfAServiceWhoseLastRunDiedSaysSo(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "died", "instance_id: died-a")
	name := uniqueName(t)
	install(t, name, cfg)
	started := time.Now()
	proxyCLI(t, "start", "--name", name)
	st := waitPolled(t, name, started, 0)
	if status := proxyCLI(t, "status", "--name", name); strings.Contains(status, "ended without a stop") {
		t.Errorf("status of the running service says a run ended without a stop:\n%s", status)
	}
	data, err := os.ReadFile("/var/run/" + name + ".pid")
	if err != nil {
		t.Skipf("no SysV supervisor's pid file (%v): the test kills the supervisor, so that nothing starts the proxy again", err)
	}
	supervisor := atoi(t, strings.TrimSpace(string(data)))
	for _, pid := range []int{supervisor, st.PID} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the killed supervisor and proxy to be gone", func() bool { return gone(supervisor) && gone(st.PID) })

	// Asked once: the supervisor may still be a zombie here, or be reaped
	// while the init script reads its state; either way it is not running
	// (TestSysVScriptCalls… in proxy/service).
	status := proxyCLI(t, "status", "--name", name)
	want := fmt.Sprintf("=> its last run (pid %d, since %s) ended without a stop: killed, crashed, or its host went down", st.PID, st.StartedAt.Format(time.RFC3339))
	if !strings.Contains(status, "running:        no") || !strings.Contains(status, want) ||
		!strings.Contains(status, "=> stopped but configured, and started at boot") || strings.Contains(status, "warm standby") {
		t.Errorf("status of the service whose supervisor and proxy were killed: want not running, %q, started at boot, no warm standby:\n%s", want, status)
	}

	again := time.Now()
	proxyCLI(t, "start", "--name", name)
	waitPolled(t, name, again, st.PID)
	proxyCLI(t, "stop", "--name", name)
	if status := proxyCLI(t, "status", "--name", name); strings.Contains(status, "ended without a stop") || !strings.Contains(status, "=> stopped but configured, and started at boot") {
		t.Errorf("status of the service started again and stopped gracefully: want no line on a run that died:\n%s", status)
	}
}

// TestInstallNotesAConfigOthersMayRead: install copies the config into a
// private file of the service's; when the file it copied (the account's
// token and key) is one every user may read, its output says so, naming
// it, and the install goes on. A private one gets no such note.
func TestInstallNotesAConfigOthersMayRead(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "noted", "instance_id: noted-a")
	if out := install(t, uniqueName(t), cfg, "--manual-start"); strings.Contains(out, "readable by") {
		t.Errorf("install of a private config notes it:\n%s", out)
	}
	if err := os.Chmod(cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	out := install(t, uniqueName(t), cfg, "--manual-start")
	if want := "Note: " + cfg + ", which install copied, holds the account's token and key and is readable by every user (mode -rw-r--r--): remove it, or chmod 600 it"; !strings.Contains(out, want) {
		t.Errorf("install of a config every user may read: want %q in:\n%s", want, out)
	}
}

// TestProxyStartSaysWhyItsServiceCannotRun: `proxy start` of a service
// whose config copy is not valid (a typo in a setting, made editing it as
// the docs say) starts nothing and says why, naming the setting; one whose
// token the automator refuses is started (it polls again with backoff) but
// start fails saying so. Both said "has not polled the automator yet" and
// exited 0 (a review), the first service started again every few seconds.
func TestProxyStartSaysWhyItsServiceCannotRun(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "cannotrun", "instance_id: cannotrun-a")
	name := uniqueName(t)
	// After the uninstall of install's cleanup: a stop the refused token
	// could not report leaves a spool.
	t.Cleanup(func() { _ = os.RemoveAll(psvc.StateDir(name)) })
	install(t, name, cfg)
	installed := filepath.Join(psvc.ConfigDir(name), "proxy.yaml")
	good, err := os.ReadFile(installed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(installed, append(append([]byte(nil), good...), "grace_periodd: 5s\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(bin.proxy, "start", "--name", name)
	if r.Code == 0 || !strings.Contains(r.Stderr, "service "+name+" was not started") || !strings.Contains(r.Stderr, "grace_periodd") {
		t.Errorf("start of a service whose config has a typo: %v; want it refused, naming the setting", r)
	}
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "running:        no") {
		t.Errorf("a refused start started the service:\n%s", status)
	}

	if err := os.WriteFile(installed, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(bin.automator, "account", "delete", "acme", "--data-dir", a.DataDir); r.Code != 0 {
		t.Fatalf("account delete: %v", r)
	}
	r = runCLI(bin.proxy, "start", "--name", name)
	if r.Code == 0 || !strings.Contains(r.Stderr, "started service "+name+", but it polls nothing: the automator refuses its config: token refused") {
		t.Errorf("start of a service whose token the automator refuses: %v; want it to fail saying so", r)
	}
	proxyCLI(t, "stop", "--name", name)
	// Stopped, started at boot (no standby), its automator down: its
	// status speaks of no failover (a review).
	a.proc.Kill(t)
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "=> stopped and configured, but the automator is not reachable from here now: started, it would poll nothing until it is") {
		t.Errorf("status of a stopped service started at boot, its automator down:\n%s", status)
	}
}

// TestAStopThatLeavesResultsInTheSpoolSaysSo: a service stopped while a
// result it could not post (its automator gone) waits in its spool says so
// as it stops, and its status says so while it is stopped, with how many
// and that its next start posts them (a review: the stop took its grace
// period and said only "Stopped service").
func TestAStopThatLeavesResultsInTheSpoolSaysSo(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "spooled", "instance_id: spooled-a", "grace_period: 1s")
	name := uniqueName(t)
	// After the uninstall of install's cleanup, which leaves the spool.
	t.Cleanup(func() { _ = os.RemoveAll(psvc.StateDir(name)) })
	install(t, name, cfg)
	proxyCLI(t, "start", "--name", name)
	// Killed as the test ends: it waits for its unit's end, which the
	// automator, killed below, never gives.
	proctest.Start(t, "exec", bin.automator, "exec", "--data-dir", a.DataDir, "--account", "acme", "--timeout", "5m", "slow.sh", w.dir)
	started := filepath.Join(w.dir, "trace", "slow.started")
	for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("slow.sh did not start within a minute")
		}
	}
	a.proc.Kill(t)
	if err := os.WriteFile(filepath.Join(w.dir, "trace", "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := proxyCLI(t, "stop", "--name", name)
	if want := "1 results of units it ran could not be posted and wait in " + filepath.Join(psvc.StateDir(name), "spool") + ": its next start posts them."; !strings.Contains(out, want) {
		t.Errorf("proxy stop with a result unposted said:\n%s\nwant %q", out, want)
	}
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "spool:          1 results of units this proxy ran wait in ") {
		t.Errorf("status of the stopped service with a result in its spool:\n%s", status)
	}
}
