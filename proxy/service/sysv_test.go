//go:build linux

package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/pidtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// The SysV script is exercised here without root: rendered with its pid and
// log files in a temporary directory, around a fake service that records
// what happens to it. test/service runs the real thing as root.

// fakeService is a /bin/sh service: on start it writes its pid, the
// variable OPSGATE_TEST_VAR of its environment if set (before "started", so
// a test that has seen "started" sees it too) and "started"; "term" on
// SIGTERM, and then exits once the file release exists (mode graceful, and
// json, which also logs a JSON record on stdout) or never (mode stubborn:
// it ignores SIGTERM).
const fakeService = `#!/bin/sh
dir=$1
echo $$ >"$dir/pid.tmp" && mv "$dir/pid.tmp" "$dir/pid"
[ -z "$OPSGATE_TEST_VAR" ] || echo "env=$OPSGATE_TEST_VAR" >>"$dir/events"
echo started >>"$dir/events"
[ "$2" != json ] || echo '{"level":"INFO","msg":"started"}'
if [ "$2" = stubborn ]; then
	trap 'echo term >>"$dir/events"' TERM
else
	trap 'echo term >>"$dir/events"; while [ ! -e "$dir/release" ]; do sleep 0.05; done; exit 0' TERM
fi
while :; do sleep 0.05; done
`

type sysvFixture struct {
	dir, script, pidFile, logFile string
}

func newSysV(t *testing.T, mode string, stopTimeout time.Duration) *sysvFixture {
	t.Helper()
	for _, tool := range []string{"setsid", "sed", "cut", "readlink", "tr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	dir := t.TempDir()
	f := &sysvFixture{dir: dir, script: filepath.Join(dir, "svc-init"), pidFile: filepath.Join(dir, "svc.pid"), logFile: filepath.Join(dir, "svc.log")}
	daemon := filepath.Join(dir, "daemon.sh")
	if err := os.WriteFile(daemon, []byte(fakeService), 0o755); err != nil {
		t.Fatal(err)
	}
	s := Spec{Name: "svc-test", Description: "a test", Executable: daemon, Arguments: []string{dir, mode}, StopTimeout: stopTimeout}
	if err := os.WriteFile(f.script, []byte(sysvScript(s, f.pidFile, f.logFile, filepath.Join(dir, "environment"), "0.2")), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever happened, nothing of the session outlives the test.
		if pid, err := readInt(f.pidFile); err == nil {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		if pid, err := readInt(filepath.Join(dir, "pid")); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			log, _ := os.ReadFile(f.logFile)
			t.Logf("service log:\n%s", log)
		}
	})
	return f
}

// run runs the init script with an action and returns its exit code and
// output.
func (f *sysvFixture) run(t *testing.T, action string) (int, string) {
	t.Helper()
	cmd := exec.Command(f.script, action)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %s: %v", f.script, action, err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

func (f *sysvFixture) events() []string {
	data, _ := os.ReadFile(filepath.Join(f.dir, "events"))
	return strings.Fields(string(data))
}

func (f *sysvFixture) count(event string) int {
	n := 0
	for _, e := range f.events() {
		if e == event {
			n++
		}
	}
	return n
}

func readInt(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// TestSysVScriptStopWaitsForRunningWork: stop sends SIGTERM to the service
// and returns only once it has finished; status follows LSB (0 running, 3
// not running).
func TestSysVScriptStopWaitsForRunningWork(t *testing.T) {
	f := newSysV(t, "graceful", time.Minute)
	if code, out := f.run(t, "status"); code != 3 {
		t.Fatalf("status before start: exit %d %q, want 3", code, out)
	}
	f.start(t)
	if code, out := f.run(t, "status"); code != 0 || !strings.Contains(out, "is running") {
		t.Fatalf("status: exit %d %q, want 0, running", code, out)
	}
	pid, err := readInt(filepath.Join(f.dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}

	stop := exec.Command(f.script, "stop")
	var out bytes.Buffer
	stop.Stdout, stop.Stderr = &out, &out
	if err := stop.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop.Wait() }()
	waittest.Until(t, "SIGTERM to reach the service", func() bool { return f.count("term") == 1 })
	select {
	case err := <-stopped:
		t.Fatalf("stop returned (%v) while the service was still finishing its work: %s", err, out.String())
	default:
	}
	if pidtest.Gone(pid) {
		t.Fatal("the service died on SIGTERM instead of finishing its work")
	}
	if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waittest.Recv(t, stopped, "the init script's stop to return once the service finished its work"); err != nil {
		t.Fatalf("stop: %v: %s", err, out.String())
	}
	if !pidtest.Gone(pid) {
		t.Fatal("stop returned while the service still runs")
	}
	if code, out := f.run(t, "status"); code != 3 {
		t.Fatalf("status after stop: exit %d %q, want 3", code, out)
	}
	if _, err := os.Stat(f.pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pid file is left after stop: %v", err)
	}
	if f.count("started") != 1 {
		t.Fatalf("events %q: the supervisor started the stopped service again", f.events())
	}
}

// TestSysVScriptRestartsAServiceThatDies: SysV init does not supervise, so
// the script does. The service gets the variables of its environment file
// (HTTPS_PROXY, say) on every start.
func TestSysVScriptRestartsAServiceThatDies(t *testing.T) {
	f := newSysV(t, "graceful", time.Minute)
	if err := os.WriteFile(filepath.Join(f.dir, "environment"), []byte("OPSGATE_TEST_VAR='a b'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	first := f.start(t)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, "the service to be started again", func() bool { return f.count("started") == 2 })
	second, err := readInt(filepath.Join(f.dir, "pid"))
	if err != nil || second == first {
		t.Fatalf("pid after the restart: %d %v (first %d)", second, err, first)
	}
	if code, _ := f.run(t, "status"); code != 0 {
		t.Fatalf("status after the restart: exit %d, want 0", code)
	}
	if f.count("env=a") != 2 {
		t.Errorf("events %q: the environment file did not reach both starts", f.events())
	}
	log, _ := os.ReadFile(f.logFile)
	if !strings.Contains(string(log), "exited with status 137; starting it again") {
		t.Errorf("the log does not say why the service was started again:\n%s", log)
	}
	if code, out := f.run(t, "stop"); code != 0 {
		t.Fatalf("stop: exit %d %q", code, out)
	}
	if !pidtest.Gone(second) {
		t.Fatal("the restarted service still runs after stop")
	}
}

// TestSysVScriptSaysItRestartsAServiceInJSONAfterJSON: a service that
// logs JSON (log_format json) gets the supervisor's line about its restart
// as a JSON record too, so that every line of its log file parses.
func TestSysVScriptSaysItRestartsAServiceInJSONAfterJSON(t *testing.T) {
	f := newSysV(t, "json", time.Minute)
	if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := f.run(t, "start"); code != 0 {
		t.Fatalf("start: exit %d %q", code, out)
	}
	waittest.Until(t, "the service to log", func() bool { log, _ := os.ReadFile(f.logFile); return len(log) > 0 })
	first, err := readInt(filepath.Join(f.dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, "the service to be started again", func() bool { return f.count("started") == 2 })
	if code, out := f.run(t, "stop"); code != 0 {
		t.Fatalf("stop: exit %d %q", code, out)
	}
	log, _ := os.ReadFile(f.logFile)
	if !strings.Contains(string(log), "exited with status 137; starting it again") {
		t.Fatalf("the log does not say why the service was started again:\n%s", log)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("a line of the log is not JSON: %q", l)
		}
	}
}

// TestSysVScriptKillsAServiceThatDoesNotStop: after the stop timeout the
// whole session is killed.
func TestSysVScriptKillsAServiceThatDoesNotStop(t *testing.T) {
	f := newSysV(t, "stubborn", time.Second)
	pid := f.start(t)
	code, out := f.run(t, "stop")
	if code != 0 || !strings.Contains(out, "did not stop within 1 seconds") {
		t.Fatalf("stop: exit %d %q", code, out)
	}
	waittest.Until(t, "the killed service to be gone", func() bool { return pidtest.Gone(pid) })
	if code, _ := f.run(t, "status"); code != 3 {
		t.Fatalf("status after the kill: exit %d, want 3", code)
	}
}

// TestSysVScriptCallsAZombieNotRunning: a supervisor killed with SIGKILL
// stays a zombie until it is reaped, seconds where PID 1 reaps late; status
// calls it not running, and start starts the service instead of saying it
// already runs.
func TestSysVScriptCallsAZombieNotRunning(t *testing.T) {
	f := newSysV(t, "graceful", time.Minute)
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = zombie.Wait() }() // reaped only at the end: a zombie meanwhile
	waittest.Until(t, "the exited child to be a zombie", func() bool { return procState(zombie.Process.Pid) == "Z" })
	if err := os.WriteFile(f.pidFile, []byte(strconv.Itoa(zombie.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := f.run(t, "status"); code != 1 || !strings.Contains(out, "is not running, but its pid file") {
		t.Fatalf("status of a pid file naming a zombie: exit %d %q, want 1, not running", code, out)
	}
	if code, out := f.run(t, "start"); code != 0 || strings.Contains(out, "already running") {
		t.Fatalf("start over a pid file naming a zombie: exit %d %q, want it started", code, out)
	}
	waittest.Until(t, "the service to start", func() bool { return f.count("started") == 1 })
	if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := f.run(t, "stop"); code != 0 {
		t.Fatalf("stop: exit %d %q", code, out)
	}
}

// TestSysVScriptCallsAProcessGoneBeforeItsStateIsReadNotRunning: the
// zombie named by the pid file may be reaped between the moment the script
// finds its /proc file and the moment it reads its state; that read then
// finds nothing, and nothing is not a running process. That moment cannot
// be made on demand, so a sed that finds the file gone stands in for it,
// for the pid of a running supervisor (which status would otherwise call
// running): only a state that was read makes a process alive.
func TestSysVScriptCallsAProcessGoneBeforeItsStateIsReadNotRunning(t *testing.T) {
	f := newSysV(t, "graceful", time.Minute)
	f.start(t)
	defer func() {
		if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if code, out := f.run(t, "stop"); code != 0 {
			t.Fatalf("stop: exit %d %q", code, out)
		}
	}()
	bin := filepath.Join(f.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	gone := "#!/bin/sh\nfor f; do :; done\necho \"sed: can't read $f: No such file or directory\" >&2\nexit 2\n"
	if err := os.WriteFile(filepath.Join(bin, "sed"), []byte(gone), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(f.script, "status")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "is not running, but its pid file") {
		t.Fatalf("status when the state of the pid file's process could not be read: %v %q, want exit 1, not running", err, out)
	}
}

// stranger is an unrelated process, in a session of its own, that a stale
// pid file may name: it records SIGTERM in the file term of dir and runs
// on. Killed, with its session, when the test ends.
func stranger(t *testing.T, dir string) int {
	t.Helper()
	script := filepath.Join(dir, "stranger.sh")
	body := "#!/bin/sh\ntrap 'echo term >>\"$1/stranger-term\"' TERM\nwhile :; do sleep 0.05; done\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// TestSysVScriptDoesNotTakeAStrangerForItsSupervisor: a stale pid file (the
// supervisor killed with SIGKILL, or a pid file that outlived a reboot) may
// name a live process that is not the service's. Status calls the service
// not running, start starts it instead of saying it already runs, and stop
// leaves that process alone: no SIGTERM, and no SIGKILL to its session
// after the stop timeout.
func TestSysVScriptDoesNotTakeAStrangerForItsSupervisor(t *testing.T) {
	f := newSysV(t, "graceful", time.Second)
	other := stranger(t, f.dir)
	writePID := func() {
		t.Helper()
		if err := os.WriteFile(f.pidFile, []byte(strconv.Itoa(other)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writePID()
	if code, out := f.run(t, "status"); code != 1 || !strings.Contains(out, "is not running, but its pid file") {
		t.Errorf("status of a pid file naming an unrelated process: exit %d %q, want 1, not running", code, out)
	}
	if code, out := f.run(t, "start"); code != 0 || strings.Contains(out, "already running") {
		t.Errorf("start over a pid file naming an unrelated process: exit %d %q, want it started", code, out)
	} else {
		waittest.Until(t, "the service to start", func() bool { return f.count("started") == 1 })
		if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if code, out := f.run(t, "stop"); code != 0 {
			t.Fatalf("stop of the started service: exit %d %q", code, out)
		}
	}
	writePID()
	if code, out := f.run(t, "stop"); code != 0 || !strings.Contains(out, "is not running") {
		t.Errorf("stop with a pid file naming an unrelated process: exit %d %q, want 0, not running", code, out)
	}
	if pidtest.Gone(other) {
		t.Errorf("stop killed the unrelated process its pid file named")
	}
	if term, err := os.ReadFile(filepath.Join(f.dir, "stranger-term")); err == nil {
		t.Errorf("stop sent SIGTERM to the unrelated process its pid file named (%q)", term)
	}
}

// TestSysVScriptDoesNotTakeAKernelThreadForItsSupervisor: a process whose
// argv reads empty is read again (one in the middle of an exec, as the
// supervisor is on its way through setsid, shows none for a moment), but a
// kernel thread's stays empty: a stale pid file naming one (kthreadd, pid
// 2, after a reboot) is not the service running.
func TestSysVScriptDoesNotTakeAKernelThreadForItsSupervisor(t *testing.T) {
	if comm, err := os.ReadFile("/proc/2/comm"); err != nil || strings.TrimSpace(string(comm)) != "kthreadd" {
		t.Skipf("pid 2 is not kthreadd here (%q, %v)", comm, err)
	}
	if argv, err := os.ReadFile("/proc/2/cmdline"); err != nil || len(argv) != 0 {
		t.Skipf("kthreadd's argv is not empty here (%q, %v)", argv, err)
	}
	f := newSysV(t, "graceful", time.Second)
	if err := os.WriteFile(f.pidFile, []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := f.run(t, "status"); code != 1 || !strings.Contains(out, "is not running, but its pid file") {
		t.Errorf("status of a pid file naming kthreadd: exit %d %q, want 1, not running", code, out)
	}
}

// supervisors are the pids of the supervisors of script: the processes
// whose argv holds script and _supervise (setsid on its way to becoming
// one too), but not their children that have yet to exec the service.
func supervisors(t *testing.T, script string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	isOne := func(pid int) bool {
		argv, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			return false
		}
		var script1, supervise bool
		for _, a := range strings.Split(string(argv), "\x00") {
			script1 = script1 || a == script
			supervise = supervise || a == "_supervise"
		}
		return script1 && supervise
	}
	parent := func(pid int) int {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			return 0
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 2 {
			return 0
		}
		ppid, _ := strconv.Atoi(fields[1])
		return ppid
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isOne(pid) || isOne(parent(pid)) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// TestSysVScriptStartsOneSupervisorForStartsAtOnce: starts at once (an
// operator's and a boot's, say) start one supervisor between them; were
// there two, stop would stop the one in the pid file, and the other would
// keep starting the service again. setsid is slowed down here, so that the
// supervisor of the first start takes a while to become one: the next
// start must find it running all the same. No lock is left behind.
func TestSysVScriptStartsOneSupervisorForStartsAtOnce(t *testing.T) {
	f := newSysV(t, "graceful", time.Second)
	t.Cleanup(func() {
		for _, pid := range supervisors(t, f.script) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(f.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	slow := "#!/bin/sh\nsleep 0.3\nexec " + shQuote(setsid) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "setsid"), []byte(slow), 0o755); err != nil {
		t.Fatal(err)
	}
	const starts = 8
	var wg sync.WaitGroup
	codes, outs := make([]int, starts), make([]string, starts)
	for i := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(f.script, "start")
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, _ := cmd.CombinedOutput()
			codes[i], outs[i] = cmd.ProcessState.ExitCode(), string(out)
		}()
	}
	wg.Wait()
	for i := range starts {
		if codes[i] != 0 {
			t.Errorf("start: exit %d %q", codes[i], outs[i])
		}
	}
	if n := len(supervisors(t, f.script)); n != 1 {
		t.Errorf("%d starts at once left %d supervisors, want 1: %q", starts, n, outs)
	}
	if code, out := f.run(t, "stop"); code != 0 {
		t.Fatalf("stop: exit %d %q", code, out)
	}
	if pids := supervisors(t, f.script); len(pids) != 0 {
		t.Errorf("supervisors %v still run after stop", pids)
	}
	f.noLockLeft(t)
}

// TestSysVScriptTakesOverTheLockOfAKilledStart: a start killed with SIGKILL
// while it holds the lock (or the machine going down under it) cannot
// remove it; its holder gone, the next start takes it over.
func TestSysVScriptTakesOverTheLockOfAKilledStart(t *testing.T) {
	f := newSysV(t, "graceful", time.Second)
	bin := filepath.Join(f.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// A setsid that hangs: the start holds the lock, waiting for its
	// supervisor.
	hang := "#!/bin/sh\necho $$ >\"" + f.dir + "/hung\"\nexec sleep 60\n"
	if err := os.WriteFile(filepath.Join(bin, "setsid"), []byte(hang), 0o755); err != nil {
		t.Fatal(err)
	}
	start := exec.Command(f.script, "start")
	start.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := start.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pid, err := readInt(filepath.Join(f.dir, "hung")); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	waittest.Until(t, "the start to hold the lock", func() bool {
		_, err := readInt(filepath.Join(f.dir, "hung"))
		return err == nil
	})
	if _, err := os.Stat(f.pidFile + ".lock"); err != nil {
		t.Fatalf("the hanging start holds no lock: %v", err)
	}
	if err := start.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = start.Wait()

	begun := time.Now()
	if code, out := f.run(t, "start"); code != 0 || !strings.Contains(out, "Started") {
		t.Fatalf("start after a start killed holding the lock: exit %d %q, want it started", code, out)
	}
	if d := time.Since(begun); d > 5*time.Second {
		t.Errorf("start took %v: it waited for the lock of a start that is gone", d)
	}
	f.stopStarted(t)
}

// start starts the service, waits until it has, and returns its
// supervisor's pid, from the pid file.
func (f *sysvFixture) start(t *testing.T) int {
	t.Helper()
	if code, out := f.run(t, "start"); code != 0 {
		t.Fatalf("start: exit %d %q", code, out)
	}
	waittest.Until(t, "the service to start", func() bool { return f.count("started") == 1 })
	pid, err := readInt(filepath.Join(f.dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// stopStarted waits for the service a start started, lets it end when
// stopped, stops it, and checks that the lock left nothing behind.
func (f *sysvFixture) stopStarted(t *testing.T) {
	t.Helper()
	waittest.Until(t, "the service to start", func() bool { return f.count("started") == 1 })
	if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := f.run(t, "stop"); code != 0 {
		t.Fatalf("stop: exit %d %q", code, out)
	}
	f.noLockLeft(t)
}

// noLockLeft checks that no file of the start and stop lock is left.
func (f *sysvFixture) noLockLeft(t *testing.T) {
	t.Helper()
	if locks, _ := filepath.Glob(f.pidFile + ".lock*"); len(locks) != 0 {
		t.Errorf("files of the lock left behind: %q", locks)
	}
}

// procState is the state letter of /proc/PID/stat ("" once it is gone).
func procState(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return ""
	}
	return string(data[i+2])
}

// TestSysVScriptRunsAsTheGivenUser: the command drops privileges with
// setpriv, to the user and its group.
func TestSysVScriptRunsAsTheGivenUser(t *testing.T) {
	s := testSpec()
	s.User, s.Group = "opsgate", "opsgate-grp"
	script := SysVScript(s)
	want := "exec setpriv --reuid='opsgate' --regid='opsgate-grp' --init-groups -- '/usr/local/bin/proxy' '--service' 'proxy' 'run' '--config' '/etc/proxy/proxy.yaml'"
	if !strings.Contains(script, want) {
		t.Fatalf("script lacks %q:\n%s", want, script)
	}
	if !strings.Contains(SysVScript(testSpec()), "exec '/usr/local/bin/proxy' '--service'") {
		t.Fatal("a root service's script drops privileges")
	}
}

func TestShQuote(t *testing.T) {
	out, err := exec.Command("sh", "-c", "printf '%s|' "+shQuote("it's $HOME `x` \\ \"q\"")+" "+shQuote("")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "it's $HOME `x` \\ \"q\"||"; got != want {
		t.Fatalf("sh read %q, want %q", got, want)
	}
}
