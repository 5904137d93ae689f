//go:build linux

package service

import (
	"bytes"
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

// TestProxyServiceInstallServeStopStartUninstall is the life of an
// installed proxy: install (stopped, configured), start, serve a unit, stop
// while a unit runs (it finishes first: the same path as `proxy run` on
// SIGTERM), a unit queued while stopped waits, start again (it runs), a
// crash (the service manager starts it again), uninstall (no file and no
// process left behind).
func TestProxyServiceInstallServeStopStartUninstall(t *testing.T) {
	// Not parallel: it compares the service directories before and after,
	// where another test's service would show as left behind.
	requireRoot(t)
	a := startAutomator(t)
	c := a.Client(t)
	w := newWorkDir(t)
	// An allowed_env entry no command may set: status says it, as run does.
	cfg := w.config(t, a.profile(t, "acme"), "acme", "instance_id: svc-a", "grace_period: 20s", "allowed_env: [DEPLOY_TARGET, PATH]")
	name := uniqueName(t)
	before := snapshot(t)

	out := install(t, name, cfg)
	platform := psvc.Platform()
	t.Logf("service manager: %s", platform)
	installedCfg := filepath.Join("/etc", name, "proxy.yaml")
	if !strings.Contains(out, installedCfg) {
		t.Errorf("install output does not name the config copy %s:\n%s", installedCfg, out)
	}
	fi, err := os.Stat(installedCfg)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config copy: %v, mode %v; want 0600 (it holds the token and key)", err, fi.Mode())
	}
	if data, _ := os.ReadFile(installedCfg); !strings.Contains(string(data), "state_dir: '/var/lib/"+name+"'") {
		t.Errorf("the config copy does not set state_dir:\n%s", data)
	}
	status := proxyCLI(t, "status", "--name", name)
	for _, want := range []string{"running:        no", "starts at boot: yes", "(valid: instance svc-a", "last poll:      never", "=> stopped but configured",
		`config:         allowed_env lists what no command may set: environment variable "PATH" is refused`} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the installed service lacks %q:\n%s", want, status)
		}
	}

	// Start: it polls and serves a unit.
	started := time.Now()
	proxyCLI(t, "start", "--name", name)
	st := waitPolled(t, name, started, 0)
	if st.InstanceID != "svc-a" {
		t.Fatalf("state %+v, want instance svc-a", st)
	}
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "running:        yes") || !strings.Contains(status, "=> active") {
		t.Errorf("status of the started service:\n%s", status)
	}
	if r := a.Exec("--account", "acme", "--timeout", "60s", "record.sh", w.trace, "first"); r.Code != 0 || r.Stdout != "ran first on svc-a as root\n" {
		t.Fatalf("exec on the service: %v", r)
	}

	// Stop while a unit runs: the unit finishes and its result is posted
	// before the service ends.
	slow := submit(t, c, "acme", time.Minute, "slow.sh", w.dir)
	waitFor(t, 30*time.Second, "the slow unit to start", func() bool { _, err := os.Stat(filepath.Join(w.dir, "trace", "slow.started")); return err == nil })
	stop := exec.Command(bin.proxy, "stop", "--name", name)
	var stopOut bytes.Buffer
	stop.Stdout, stop.Stderr = &stopOut, &stopOut
	if err := stop.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop.Wait() }()
	waitFor(t, 30*time.Second, "the service to stop polling and wait for its running unit", func() bool {
		st, err := readState(name)
		return err == nil && !st.StoppingAt.IsZero() && st.Running == 1
	})
	select {
	case err := <-stopped:
		t.Fatalf("proxy stop returned (%v) while a unit was still running: %s", err, stopOut.String())
	default:
	}
	if err := os.WriteFile(filepath.Join(w.dir, "trace", "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("proxy stop: %v: %s", err, stopOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("proxy stop did not return")
	}
	if ws := get(t, c, slow); ws.GetState() != automatorv1.State_STATE_SUCCEEDED || string(ws.GetResult().GetStdout()) != "done\n" {
		t.Fatalf("the unit running during the stop: %v, want succeeded with its output", ws)
	}
	st, err = readState(name)
	if err != nil || st.StoppedAt.IsZero() || !gone(st.PID) {
		t.Fatalf("after stop: state %+v (%v); the process must be gone", st, err)
	}
	status = proxyCLI(t, "status", "--name", name)
	for _, want := range []string{"running:        no", "=> stopped but configured", "last poll:      " + st.LastPoll.Format(time.RFC3339)} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the stopped service lacks %q:\n%s", want, status)
		}
	}

	// A unit queued while the service is stopped waits for it (once the
	// automator has seen its connection go: proctest.AwaitNoOpenPolls).
	proctest.AwaitNoOpenPolls(t, a.DataDir, "acme", 15*time.Second)
	queued := submit(t, c, "acme", 2*time.Minute, "record.sh", w.trace, "queued")
	if ws := get(t, c, queued); ws.GetState() != automatorv1.State_STATE_QUEUED {
		t.Fatalf("a unit submitted while the only proxy is stopped: %v, want queued", ws)
	}
	if r := runCLI(bin.proxy, "status", "--name", name); !strings.Contains(r.Stdout, "running:        no") {
		t.Fatalf("the service runs though stopped: %v", r)
	}
	if ws := get(t, c, queued); ws.GetState() != automatorv1.State_STATE_QUEUED {
		t.Fatalf("the queued unit did not wait: %v", ws)
	}
	if runs := w.runsOf(queued); len(runs) != 0 {
		t.Fatalf("the queued unit ran while the service was stopped: %q", runs)
	}

	// Start again: the queued unit runs, once.
	restarted := time.Now()
	proxyCLI(t, "start", "--name", name)
	if ws := wait(t, c, queued, time.Minute); ws.GetState() != automatorv1.State_STATE_SUCCEEDED || ws.GetInstanceId() != "svc-a" {
		t.Fatalf("the queued unit after the start: %v", ws)
	}
	st = waitPolled(t, name, restarted, 0)

	// A crash: the service manager starts it again.
	crashed := time.Now()
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st = waitPolled(t, name, crashed, st.PID)
	if r := a.Exec("--account", "acme", "--timeout", "60s", "record.sh", w.trace, "after-crash"); r.Code != 0 {
		t.Fatalf("exec after the crash: %v", r)
	}

	// Every unit ran exactly once.
	runs := w.runs()
	if len(runs) != 4 {
		t.Errorf("trace %q: want 4 runs (first, slow, queued, after-crash)", runs)
	}
	for _, id := range []string{slow, queued} {
		if n := len(w.runsOf(id)); n != 1 {
			t.Errorf("unit %s ran %d times", id, n)
		}
	}

	// Uninstall: the service, its files and its processes are gone.
	supervisor := 0
	if data, err := os.ReadFile("/var/run/" + name + ".pid"); err == nil {
		supervisor = atoi(t, string(data))
	}
	// What the service manager holds: its definition and, for SysV, the
	// rc.d links (the pid file goes with the stop; the log is kept).
	made := []string{installedCfg, filepath.Join("/etc", name), filepath.Join("/var/lib", name)}
	for _, pattern := range []string{"/etc/init.d/" + name, "/etc/systemd/system/" + name + ".service", "/etc/rc[0-6S].d/[SK][0-9][0-9]" + name} {
		m, _ := filepath.Glob(pattern)
		made = append(made, m...)
	}
	out = proxyCLI(t, "uninstall", "--name", name)
	if !gone(st.PID) || (supervisor > 0 && !gone(supervisor)) {
		t.Errorf("a process of the service outlived uninstall (proxy %d, supervisor %d)", st.PID, supervisor)
	}
	for _, p := range made {
		if !strings.Contains(out, p) {
			t.Errorf("uninstall does not say it removed %s:\n%s", p, out)
		}
	}
	assertLogKept(t, name, out)
	assertNothingLeft(t, name, before, snapshot(t))
	if r := runCLI(bin.proxy, "status", "--name", name); r.Code != 1 || !strings.Contains(r.Stderr, "not installed") {
		t.Errorf("status after uninstall: %v, want exit 1, not installed", r)
	}
}

// TestProxyServiceRunsAsAnUnprivilegedUser: --user runs the proxy, and so
// its scripts, as that user, who can read the config but not change it.
func TestProxyServiceRunsAsAnUnprivilegedUser(t *testing.T) {
	// Not parallel: it compares the service directories before and after,
	// where another test's service would show as left behind.
	requireRoot(t)
	u := requireNobody(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "acme", "instance_id: svc-nobody")
	name := uniqueName(t)
	before := snapshot(t)
	install(t, name, cfg, "--user", "nobody", "--manual-start")

	fi, err := os.Stat(filepath.Join("/etc", name, "proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o640 || sys.Uid != 0 || int(sys.Gid) != u.GID {
		t.Errorf("config copy: mode %v, owner %d:%d; want 0640 root:%s", fi.Mode().Perm(), sys.Uid, sys.Gid, u.Group)
	}
	if fi, err := os.Stat(filepath.Join("/var/lib", name)); err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != u.UID {
		t.Errorf("state directory not owned by nobody: %v", err)
	}
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "starts at boot: no") {
		t.Errorf("a --manual-start service starts at boot:\n%s", status)
	}

	started := time.Now()
	proxyCLI(t, "start", "--name", name)
	waitPolled(t, name, started, 0)
	if r := a.Exec("--account", "acme", "--timeout", "60s", "record.sh", w.trace, "who"); r.Code != 0 || r.Stdout != "ran who on svc-nobody as nobody\n" {
		t.Fatalf("exec: %v, want the script to run as nobody", r)
	}
	assertLogKept(t, name, proxyCLI(t, "uninstall", "--name", name))
	assertNothingLeft(t, name, before, snapshot(t))
}

// TestProxyInstallRefusesAUserWhoCannotReachItsBinaryOrScripts: a service
// run as --user that cannot reach the proxy binary, or its scripts_dir,
// would only fail at every start (the config check cannot open
// scripts_dir) while its service manager starts it again and again.
// install refuses it, naming what is in the way.
func TestProxyInstallRefusesAUserWhoCannotReachItsBinaryOrScripts(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	requireNobody(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	name := uniqueName(t)
	t.Cleanup(func() { runCLI(bin.proxy, "uninstall", "--name", name) })
	install := func(exe, cfg string) result {
		return runCLI(exe, "install", "--config", cfg, "--name", name, "--user", "nobody", "--manual-start")
	}

	// scripts_dir in a directory nobody may not search.
	private := filepath.Join(w.dir, "private")
	if err := os.MkdirAll(filepath.Join(private, "scripts"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := w.config(t, a.profile(t, "acme"), "acme")
	hiddenScripts := strings.Replace(string(mustRead(t, cfg)), "scripts_dir: "+w.scripts, "scripts_dir: "+filepath.Join(private, "scripts"), 1)
	hiddenCfg := filepath.Join(w.dir, "hidden-scripts.yaml")
	if err := os.WriteFile(hiddenCfg, []byte(hiddenScripts), 0o600); err != nil {
		t.Fatal(err)
	}
	r := install(bin.proxy, hiddenCfg)
	if r.Code != 1 || !strings.Contains(r.Stderr, "nobody cannot search "+private) || !strings.Contains(r.Stderr, "scripts_dir") {
		t.Fatalf("install with a scripts_dir nobody cannot reach: %v; want exit 1 naming %s and scripts_dir", r, private)
	}
	if st := runCLI(bin.proxy, "status", "--name", name); st.Code == 0 {
		t.Fatalf("a refused install installed the service: %v", st)
	}

	// The binary in a directory nobody may not search.
	exe := filepath.Join(private, "proxy")
	if r := runCLI("cp", bin.proxy, exe); r.Code != 0 {
		t.Fatalf("cp: %v", r)
	}
	r = install(exe, cfg)
	if r.Code != 1 || !strings.Contains(r.Stderr, "nobody cannot search "+private) || !strings.Contains(r.Stderr, exe) {
		t.Fatalf("install from a binary nobody cannot reach: %v; want exit 1 naming %s", r, exe)
	}

	// A state directory left by an earlier install (uninstall keeps one
	// whose spool holds results) of root's: the service, as nobody, could
	// not take its lock.
	stateDir := "/var/lib/" + name
	if err := os.Mkdir(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	r = install(bin.proxy, cfg)
	if want := stateDir + " is not owned by nobody; run `chown -R nobody: " + stateDir + "` first"; r.Code != 1 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("install over a state directory of root's: %v; want exit 1 saying %q", r, want)
	}
	if r := runCLI("chown", "-R", "nobody:", stateDir); r.Code != 0 {
		t.Fatalf("chown: %v", r)
	}

	// Reachable: installed.
	if r := install(bin.proxy, cfg); r.Code != 0 {
		t.Fatalf("install with everything reachable by nobody: %v", r)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestStopOfAStoppedProxyServiceSaysItWasNotRunning: `proxy stop` of an
// installed service that is not running succeeds, changes nothing, and says
// so rather than that it stopped the service.
func TestStopOfAStoppedProxyServiceSaysItWasNotRunning(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	name := uniqueName(t)
	install(t, name, w.config(t, a.profile(t, "acme"), "acme"), "--manual-start")
	if out := proxyCLI(t, "stop", "--name", name); out != "Service "+name+" is not running: nothing to stop.\n" {
		t.Errorf("proxy stop of the stopped service: %q; want it to say it is not running", out)
	}
	if status := proxyCLI(t, "status", "--name", name); !strings.Contains(status, "running:        no") {
		t.Errorf("status after a stop of the stopped service:\n%s", status)
	}
	// Its name given as an argument, or a name not installed: the
	// messages say to give --name, and which are installed (a review: they
	// advised installing the service the operator had misnamed).
	if r := runCLI(bin.proxy, "stop", name); r.Code == 0 || !strings.Contains(r.Stderr, "to name it, give --name "+name) {
		t.Errorf("proxy stop NAME: %v; want it to say to give --name %s", r, name)
	}
	for _, verb := range []string{"status", "start"} {
		r := runCLI(bin.proxy, verb, "--name", name+"-x")
		if r.Code == 0 || !strings.Contains(r.Stderr, "installed here: ") || !strings.Contains(r.Stderr, name+" (a proxy)") {
			t.Errorf("proxy %s of a name not installed: %v; want it to name %s as a proxy installed here", verb, r, name)
		}
	}
}
