//go:build linux

package service

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
	psvc "github.com/opsgate/opsgate/proxy/service"
)

// TestProxyStartRefusesAStateDirHeldByAProxyRunByHand: a proxy run by hand
// on the service's config holds the service's state directory. `proxy
// start` says so, in the line the service would log, and starts nothing;
// `proxy status` says which process holds it, also when the service was
// started behind proxy start's back and is refused again and again by its
// service manager. Once the proxy run by hand is gone the service runs,
// and start and status, which see the service's own proxy hold the
// directory, carry on as usual.
func TestProxyStartRefusesAStateDirHeldByAProxyRunByHand(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	a := startAutomator(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "acme", "instance_id: svc-held")
	name := uniqueName(t)
	install(t, name, cfg, "--manual-start")
	stateDir := psvc.StateDir(name)

	byHand := startProc(t, "proxy-by-hand", bin.proxy, "run", "--config", filepath.Join("/etc", name, "proxy.yaml"))
	proctest.WaitPolling(t, byHand, 15*time.Second)
	held := fmt.Sprintf("state_dir %s is held by another running proxy (pid %d): ", stateDir, byHand.Pid())

	r := runCLI(bin.proxy, "start", "--name", name)
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, "proxy: "+held) || strings.Count(r.Stderr, "\n") != 1 ||
		!strings.Contains(r.Stderr, "service "+name+" was not started") {
		t.Fatalf("proxy start with the state directory held: %v; want exit 1 and one line beginning %q, saying the service was not started", r, "proxy: "+held)
	}
	if _, err := os.Stat("/var/run/" + name + ".pid"); !os.IsNotExist(err) {
		t.Errorf("the refused start started the service (its pid file: %v)", err)
	}
	status := proxyCLI(t, "status", "--name", name)
	for _, want := range []string{"running:        no", fmt.Sprintf("state dir:      %s is held by pid %d, a proxy that is not this service", stateDir, byHand.Pid()), "=> stopped; its state directory is held by pid "} {
		if !strings.Contains(status, want) {
			t.Errorf("status with the state directory held lacks %q:\n%s", want, status)
		}
	}
	if strings.Contains(status, "ended without a stop") {
		t.Errorf("status with the state directory held by a running proxy says a run ended without a stop:\n%s", status)
	}

	// Started behind proxy start's back, the service is refused by the
	// held directory and started again every few seconds: running, as its
	// service manager sees it, but not the proxy that polls. (The SysV
	// supervisor counts as running meanwhile; systemd's auto-restart does
	// not.)
	if psvc.Platform() != "unix-systemv" {
		t.Logf("service manager %s: the service refused again and again is checked under SysV init only", psvc.Platform())
	} else {
		refusedAgain(t, name, held, byHand.Pid())
	}

	// The proxy run by hand stops: the service starts and holds the
	// directory itself, which start and status take for what it is.
	byHand.Signal(t, syscall.SIGTERM)
	if code := byHand.Wait(t, time.Minute); code != 0 {
		t.Fatalf("the proxy run by hand exited %d on SIGTERM", code)
	}
	started := time.Now()
	out := proxyCLI(t, "start", "--name", name)
	if !strings.Contains(out, "Started service "+name) {
		t.Errorf("proxy start once the directory is free: %q", out)
	}
	st := waitPolled(t, name, started, byHand.Pid())
	if r := runCLI(bin.proxy, "start", "--name", name); r.Code != 0 || !strings.Contains(r.Stdout, "Service "+name+" is already running: it last polled the automator at ") {
		t.Errorf("proxy start of the running service, which holds its own state directory: %v; want exit 0, saying it was already running and when it last polled", r)
	}
	status = proxyCLI(t, "status", "--name", name)
	if strings.Contains(status, "state dir:") || !strings.Contains(status, "=> active") || !strings.Contains(status, fmt.Sprintf("last run:       pid %d,", st.PID)) {
		t.Errorf("status of the service holding its own state directory:\n%s", status)
	}
}

// refusedAgain starts the SysV service by its init script while the proxy
// pid holds its state directory (whose refusal begins with held), checks
// what start and status say, and stops it again.
func refusedAgain(t *testing.T, name, held string, pid int) {
	t.Helper()
	stateDir := psvc.StateDir(name)
	if out, err := psvcInit(name, "start"); err != nil {
		t.Fatalf("init script start: %v: %s", err, out)
	}
	waitFor(t, 30*time.Second, "the service to be refused by the held state directory", func() bool {
		log, _ := os.ReadFile(serviceLog(name))
		return strings.Contains(string(log), held)
	})
	r := runCLI(bin.proxy, "start", "--name", name)
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, "proxy: "+held) || !strings.Contains(r.Stderr, "service "+name+" runs, but its proxy cannot start") {
		t.Errorf("proxy start of the service refused again and again: %v; want exit 1, the line and that its proxy cannot start", r)
	}
	status := proxyCLI(t, "status", "--name", name)
	for _, want := range []string{"running:        yes", fmt.Sprintf("state dir:      %s is held by pid %d, a proxy that is not this service", stateDir, pid), "=> running, but its proxy cannot start: its state directory is held by pid "} {
		if !strings.Contains(status, want) {
			t.Errorf("status of the service refused again and again lacks %q:\n%s", want, status)
		}
	}
	if out, err := psvcInit(name, "stop"); err != nil {
		t.Fatalf("init script stop: %v: %s", err, out)
	}
}

// psvcInit runs the service's init script, as the service manager does at
// boot, without proxy start.
func psvcInit(name, action string) (string, error) {
	r := runCLI("/etc/init.d/"+name, action)
	if r.Code != 0 {
		return r.Stdout + r.Stderr, fmt.Errorf("exit %d", r.Code)
	}
	return r.Stdout, nil
}

// TestAProxyRunByHandAsRootLeavesTheStateDirToTheServiceUser: root runs a
// proxy by hand on the config of a service installed with --user, so on a
// state directory owned by that user. Every file and directory it makes
// there (the lock, the status file, the spool and a result kept in it
// while the automator is down, with the polls it could not read the
// answers of) is the user's, with the modes a proxy run
// by that user gives them; so once it stops the service, run as that user,
// starts on the directory and posts the result the root-run proxy kept.
func TestAProxyRunByHandAsRootLeavesTheStateDirToTheServiceUser(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	u := requireNobody(t)
	a := startAutomator(t)
	c := a.Client(t)
	w := newWorkDir(t)
	cfg := w.config(t, a.profile(t, "acme"), "acme", "instance_id: svc-owned", "grace_period: 1s")
	name := uniqueName(t)
	stateDir := psvc.StateDir(name)
	// After uninstall (cleanups run last first): a failed run leaves the
	// spool behind.
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	install(t, name, cfg, "--user", "nobody", "--manual-start")

	byHand := startProc(t, "proxy-by-hand", bin.proxy, "run", "--config", filepath.Join("/etc", name, "proxy.yaml"))
	proctest.WaitPolling(t, byHand, 15*time.Second)
	waitPolled(t, name, time.Time{}, 0)

	// A result the automator cannot take: it is killed while the unit runs,
	// so the proxy keeps the result in its spool.
	slow := submit(t, c, "acme", 2*time.Minute, "slow.sh", w.dir)
	waitFor(t, 30*time.Second, "the slow unit to start", func() bool {
		_, err := os.Stat(filepath.Join(w.dir, "trace", "slow.started"))
		return err == nil
	})
	a.proc.Kill(t)
	if err := os.WriteFile(filepath.Join(w.dir, "trace", "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spooled := filepath.Join(stateDir, "spool", slow+".json")
	waitFor(t, 30*time.Second, "the result to be kept in the spool", func() bool {
		_, err := os.Stat(spooled)
		return err == nil
	})
	byHand.Signal(t, syscall.SIGTERM)
	if code := byHand.Wait(t, time.Minute); code != 0 {
		t.Fatalf("the proxy run by hand exited %d on SIGTERM", code)
	}

	want := map[string]os.FileMode{
		stateDir:                               os.ModeDir | 0o755,
		filepath.Join(stateDir, "proxy.lock"):  0o600,
		filepath.Join(stateDir, "status.json"): 0o644,
		filepath.Join(stateDir, "spool"):       os.ModeDir | 0o700,
		spooled:                                0o600,
		// Its polls for free slots failed while the automator was down,
		// and it could not say so as it stopped.
		filepath.Join(stateDir, "spool", agent.LostPollsName): 0o600,
	}
	var wrong []string
	err := filepath.Walk(stateDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		mode, known := want[p]
		switch {
		case !known:
			wrong = append(wrong, fmt.Sprintf("%s (not a file a proxy makes)", p))
		case int(st.Uid) != u.UID || int(st.Gid) != u.GID || fi.Mode() != mode:
			wrong = append(wrong, fmt.Sprintf("%s is %d:%d %v, want %d:%d %v", p, st.Uid, st.Gid, fi.Mode(), u.UID, u.GID, mode))
		}
		delete(want, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range want {
		wrong = append(wrong, p+" is missing")
	}
	if len(wrong) > 0 {
		t.Fatalf("the state directory after a proxy run by root, owned by %s (%d:%d):\n%s", u.Name, u.UID, u.GID, strings.Join(wrong, "\n"))
	}

	// The service, run as nobody, takes the directory over.
	if err := a.serve(t); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	proxyCLI(t, "start", "--name", name)
	st := waitPolled(t, name, started, byHand.Pid())
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.PID)); err != nil || !strings.Contains(string(data), fmt.Sprintf("\nUid:\t%d\t", u.UID)) {
		t.Errorf("the service's proxy, pid %d, does not run as %s (%v):\n%s", st.PID, u.Name, err, data)
	}
	if ws := wait(t, c, slow, time.Minute); ws.GetState() != automatorv1.State_STATE_SUCCEEDED || string(ws.GetResult().GetStdout()) != "done\n" {
		t.Fatalf("the result the root-run proxy kept, once the service runs: %v; want it posted, succeeded", ws)
	}
	waitFor(t, 30*time.Second, "the posted result to leave the spool", func() bool {
		_, err := os.Stat(filepath.Join(stateDir, "spool"))
		return os.IsNotExist(err)
	})
}
