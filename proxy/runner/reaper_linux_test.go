package runner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opsgate/opsgate/internal/pidtest"
)

// startSession starts `sleep 600` leading a session of its own, as a
// script does, and returns its pid and start time; the test's end kills
// and reaps it.
func startSession(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	start, err := processStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, start
}

// startScriptOf starts `sleep 600` leading a session of its own with
// WorkIDVar set to work in its environment, as the agent starts the script
// of unit work, and returns its pid; the test's end kills and reaps it.
func startScriptOf(t *testing.T, work string) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), WorkIDVar + "=" + work}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

func line(sign string, pid int, start ...uint64) string {
	s := sign + " " + strconv.Itoa(pid)
	for _, st := range start {
		s += " " + strconv.FormatUint(st, 10)
	}
	return s + "\n"
}

// textLog is the reaper's logger as a proxy that logs text starts it,
// writing to w.
func textLog(w io.Writer) *slog.Logger { return reaperLogger(w, func(string) string { return "" }) }

// killedLine is what the reaper's text line says of the sessions it
// killed.
func killedLine(sids ...int) string {
	s := make([]string, len(sids))
	for i, sid := range sids {
		s[i] = strconv.Itoa(sid)
	}
	if len(s) > 1 {
		return `sessions="[` + strings.Join(s, " ") + `]"` // quoted: it holds a space
	}
	return "sessions=[" + strings.Join(s, " ") + "]"
}

// TestReaperKillsTheSessionsStillRegisteredAtEOF: what the reaper reads
// decides what it kills when its input ends (the proxy died): a session
// still registered, and nothing else.
func TestReaperKillsTheSessionsStillRegisteredAtEOF(t *testing.T) {
	t.Parallel()
	registered, start := startSession(t)
	finished, startF := startSession(t)
	var out bytes.Buffer
	if code := serveReaper(strings.NewReader(line("+", registered, start)+line("+", finished, startF)+line("-", finished)), textLog(&out)); code != 0 {
		t.Errorf("reaper exited %d, want 0; it said %q", code, out.String())
	}
	waitFor(t, "the registered session to be killed", func() bool { return pidtest.Gone(registered) }, 10*time.Second)
	if pidtest.Gone(finished) {
		t.Errorf("the reaper killed session %d, which the proxy had deregistered", finished)
	}
	// Registered as an older proxy does, naming no unit: "-".
	if want := killedLine(registered) + " work_ids=[-]"; !strings.Contains(out.String(), want) {
		t.Errorf("the reaper said %q, want it to say %q", out.String(), want)
	}
}

// TestReaperNamesTheUnitOfEachSessionItKilledInTheSameOrder: the work ids
// line up with the sessions, "-" for one whose unit was not named, and a
// session deregistered takes its unit with it.
func TestReaperNamesTheUnitOfEachSessionItKilledInTheSameOrder(t *testing.T) {
	t.Parallel()
	named, startN := startSession(t)
	unnamed, startU := startSession(t)
	ended, startE := startSession(t)
	in := line("+", named, startN) + "= " + strconv.Itoa(named) + " w_named\n" + line("+", unnamed, startU) +
		line("+", ended, startE) + "= " + strconv.Itoa(ended) + " w_ended\n" + line("-", ended)
	var out bytes.Buffer
	if code := serveReaper(strings.NewReader(in), textLog(&out)); code != 0 {
		t.Errorf("reaper exited %d, want 0; it said %q", code, out.String())
	}
	want := killedLine(named, unnamed) + " work_ids=\"[w_named -]\""
	if unnamed < named {
		want = killedLine(unnamed, named) + " work_ids=\"[- w_named]\""
	}
	if !strings.Contains(out.String(), want) {
		t.Errorf("the reaper said %q, want it to say %q", out.String(), want)
	}
}

// TestReaperSaysNothingOfSessionsThatHadEnded: a proxy writes its
// deregistrations with its next registration, so one that dies idle leaves
// its latest scripts registered though they ended long ago. The reaper
// kills nothing of them and says nothing: its line is for scripts a dead
// proxy left running, and naming ended ones tells an operator that scripts
// were killed when none were.
func TestReaperSaysNothingOfSessionsThatHadEnded(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := cmd.Process.Pid
	start, err := processStartTime(ended)
	if err != nil {
		t.Fatal(err)
	}
	// Ended and reaped, as the proxy reaps its scripts: no zombie left.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	running, startR := startSession(t)
	var out bytes.Buffer
	if code := serveReaper(strings.NewReader(line("+", ended, start)+line("+", running, startR)), textLog(&out)); code != 0 {
		t.Errorf("reaper exited %d, want 0; it said %q", code, out.String())
	}
	waitFor(t, "the running session to be killed", func() bool { return pidtest.Gone(running) }, 10*time.Second)
	if want := killedLine(running); !strings.Contains(out.String(), want) {
		t.Errorf("the reaper said %q, want it to say %q (the session %d had ended: nothing of it was killed)", out.String(), want, ended)
	}
}

// TestReaperSaysNothingOfASessionOfZombies: a session whose processes
// have all ended but are not yet collected (zombies: their parent, PID 1
// on a host whose init reaps late, has not waited for them) has ended:
// the reaper says nothing of it, as of a session gone (a review: it named
// units that had ended before their proxy was killed, as killed by it).
func TestReaperSaysNothingOfASessionOfZombies(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	zombie := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Wait() })
	start, err := processStartTime(zombie)
	if err != nil {
		t.Fatal(err)
	}
	// Not waited for (until the test's end): a zombie.
	waitFor(t, "the session's leader to be a zombie", func() bool {
		f, err := statFields(zombie)
		return err == nil && len(f) > 0 && string(f[0]) == "Z"
	}, 10*time.Second)
	running, startR := startSession(t)
	var out bytes.Buffer
	if code := serveReaper(strings.NewReader(line("+", zombie, start)+line("+", running, startR)), textLog(&out)); code != 0 {
		t.Errorf("reaper exited %d, want 0; it said %q", code, out.String())
	}
	waitFor(t, "the running session to be killed", func() bool { return pidtest.Gone(running) }, 10*time.Second)
	if want := killedLine(running); !strings.Contains(out.String(), want) {
		t.Errorf("the reaper said %q, want it to say %q (the session %d holds a zombie only: nothing of it was killed)", out.String(), want, zombie)
	}
}

// TestReaperFindsTheScriptOfAUnitStartingByItsEnvironment: a proxy that
// died after "? WORK_ID" and before the script's registration had started
// it, or not: the reaper kills the session whose leader's environment
// holds that unit's id, and names it; a unit whose start was called off
// ("! WORK_ID"), or whose script was registered, is not looked for.
func TestReaperFindsTheScriptOfAUnitStartingByItsEnvironment(t *testing.T) {
	t.Parallel()
	starting := startScriptOf(t, "w_starting_a")
	calledOff := startScriptOf(t, "w_called_off_a")
	registered := startScriptOf(t, "w_registered_a")
	regStart, err := processStartTime(registered)
	if err != nil {
		t.Fatal(err)
	}
	in := "? w_starting_a\n? w_called_off_a\n! w_called_off_a\n? w_registered_a\n" +
		line("+", registered, regStart) + "= " + strconv.Itoa(registered) + " w_registered_a\n" + line("-", registered)
	var out bytes.Buffer
	if code := serveReaper(strings.NewReader(in), textLog(&out)); code != 0 {
		t.Errorf("reaper exited %d, want 0; it said %q", code, out.String())
	}
	waitFor(t, "the starting unit's script to be killed", func() bool { return pidtest.Gone(starting) }, 10*time.Second)
	for _, pid := range []int{calledOff, registered} {
		if pidtest.Gone(pid) {
			t.Errorf("the reaper killed session %d, whose unit was not starting when the proxy died", pid)
		}
	}
	if want := killedLine(starting) + " work_ids=[w_starting_a]"; !strings.Contains(out.String(), want) {
		t.Errorf("the reaper said %q, want it to say %q", out.String(), want)
	}
}

// TestReaperLooksForAStartingScriptUntilItHasExeced: a script whose proxy
// died between its fork and its exec still has the proxy's environment
// when the reaper reads EOF; the reaper looks again until it finds the
// unit's id (here the script appears after EOF).
func TestReaperLooksForAStartingScriptUntilItHasExeced(t *testing.T) {
	// Not parallel: it sets startingWait, which parallel tests read.
	defer func(w time.Duration) { startingWait = w }(startingWait)
	startingWait = 30 * time.Second // generous: a loaded machine starts sleep(1) late
	done := make(chan string, 1)
	go func() {
		var out bytes.Buffer
		serveReaper(strings.NewReader("? w_late_exec\n"), textLog(&out))
		done <- out.String()
	}()
	time.Sleep(100 * time.Millisecond) // the script starts after the reaper read EOF
	pid := startScriptOf(t, "w_late_exec")
	select {
	case said := <-done:
		if !strings.Contains(said, killedLine(pid)) {
			t.Errorf("the reaper said %q, want it to name session %d", said, pid)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the reaper did not end within 60s")
	}
	waitFor(t, "the late script to be killed", func() bool { return pidtest.Gone(pid) }, 10*time.Second)
}

// TestReaperSparesAProcessThatReusedThePid: a registered session whose
// leader's pid now names another process (another start time) has no
// member left, and the reaper kills nothing of it.
func TestReaperSparesAProcessThatReusedThePid(t *testing.T) {
	t.Parallel()
	pid, start := startSession(t)
	var out bytes.Buffer
	serveReaper(strings.NewReader(line("+", pid, start-1)), textLog(&out))
	if pidtest.Gone(pid) {
		t.Errorf("the reaper killed process %d, whose start time differs from the one registered for its pid", pid)
	}
	if out.Len() != 0 {
		t.Errorf("the reaper said %q, want nothing", out.String())
	}
}

// newTestReaper returns a Reaper whose process (this test binary, see
// TestMain) writes to a file the test reads with said; warned collects
// what it reports.
func newTestReaper(t *testing.T) (r *Reaper, said func() string, warned func() []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reaper.stderr")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var mu sync.Mutex
	var warnings []string
	r = NewReaper(func(err error) { mu.Lock(); warnings = append(warnings, err.Error()); mu.Unlock() }, ReaperLog{})
	r.stderr = f
	t.Cleanup(func() { r.Close() })
	return r, func() string { b, _ := os.ReadFile(path); return string(b) },
		func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), warnings...) }
}

// reaperProcess returns the running reaper's process.
func reaperProcess(t *testing.T, r *Reaper) *exec.Cmd {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		t.Fatal("no reaper runs")
	}
	return r.cmd
}

// TestAProxyThatEndsNormallyLeavesItsReaperNothingToKill: a script that
// ended is deregistered, so the reaper of a proxy that ends normally, once
// its scripts have ended, kills nothing and says nothing.
func TestAProxyThatEndsNormallyLeavesItsReaperNothingToKill(t *testing.T) {
	t.Parallel()
	r, said, warned := newTestReaper(t)
	spec := newSpec(t, "echo hi\n")
	spec.Reaper = r
	if res := run(t, spec); string(res.Stdout) != "hi\n" {
		t.Fatalf("stdout %q, want hi", res.Stdout)
	}
	cmd := reaperProcess(t, r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || said() != "" {
		t.Errorf("the reaper exited %d and said %q; want 0 and nothing (no script ran any more)", code, said())
	}
	if w := warned(); len(w) != 0 {
		t.Errorf("warnings %q, want none", w)
	}
}

// TestScriptsDoNotInheritTheReapersPipe: a script holds no end of the pipe
// to the reaper (it could keep the reaper from seeing the proxy die, or
// talk to it), nor any other pipe or socket beyond its stdio: neither the
// first script, which starts the reaper, nor a later one.
func TestScriptsDoNotInheritTheReapersPipe(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestReaper(t)
	// What this test process inherited itself (from whoever started it) a
	// script inherits too: not the runner's doing.
	inherited := map[string]string{}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range ents {
			inherited[e.Name()], _ = os.Readlink("/proc/self/fd/" + e.Name())
		}
	}
	for i := range 2 {
		spec := newSpec(t, `ls -l /proc/$$/fd/`+"\n")
		spec.Reaper = r
		res := run(t, spec)
		reaperIn, err := os.Readlink("/proc/" + strconv.Itoa(reaperProcess(t, r).Process.Pid) + "/fd/0")
		if err != nil || !strings.HasPrefix(reaperIn, "pipe:") {
			t.Fatalf("the reaper's stdin is %q (%v), want a pipe", reaperIn, err)
		}
		fds := 0
		for _, l := range strings.Split(string(res.Stdout), "\n") {
			name, target, ok := strings.Cut(l, " -> ")
			if !ok {
				continue
			}
			fds++
			f := strings.Fields(name)
			fd, _ := strconv.Atoi(f[len(f)-1])
			if target == reaperIn {
				t.Errorf("script %d holds the reaper's pipe as fd %d", i+1, fd)
			} else if fd > 2 && inherited[strconv.Itoa(fd)] != target && (strings.HasPrefix(target, "pipe:") || strings.HasPrefix(target, "socket:")) {
				t.Errorf("script %d holds fd %d, %s, beyond its stdio", i+1, fd, target)
			}
		}
		if fds < 3 {
			t.Fatalf("script %d listed %d fds: %q", i+1, fds, res.Stdout)
		}
	}
}

// TestAKilledReaperIsReplacedForLaterScripts: when the reaper dies (killed
// by someone), the proxy notices at the next script, says so once, starts
// a new reaper and registers with it the scripts still running, which it
// then kills when the proxy dies.
func TestAKilledReaperIsReplacedForLaterScripts(t *testing.T) {
	t.Parallel()
	r, said, warned := newTestReaper(t)
	dir := t.TempDir()
	spec := newSpec(t, `echo $$ > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid"; exec sleep 600`+"\n")
	spec.Args = []string{dir}
	spec.Reaper = r
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := Run(ctx, spec); done <- err }()
	running := readPid(t, filepath.Join(dir, "pid"))
	first := killReaper(t, r)

	run(t, newSpecWith(t, r, "true\n"))
	if w := warned(); len(w) != 1 || !strings.Contains(w[0], "cannot be reached") {
		t.Errorf("warnings %q, want one saying the reaper cannot be reached", w)
	}
	second := reaperProcess(t, r)
	if second == first {
		t.Fatal("no new reaper was started")
	}
	// The reaper reads EOF with the script still running, as when the
	// proxy dies: the new reaper kills the script it was told of when it
	// started.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the running script to be killed by the new reaper", func() bool { return pidtest.Gone(running) }, 10*time.Second)
	<-done
	waitFor(t, "the new reaper to say so", func() bool { return strings.Contains(said(), killedLine(running)) }, 10*time.Second)
}

// TestAReaperStartedAgainIsToldOfTheScriptsStarting: a reaper started in
// place of one that died is told of the units whose script is starting, as
// of those running: a proxy that dies before it registers such a script
// still has it killed.
func TestAReaperStartedAgainIsToldOfTheScriptsStarting(t *testing.T) {
	t.Parallel()
	r, said, _ := newTestReaper(t)
	r.prepare("w_starting_b")
	script := startScriptOf(t, "w_starting_b") // started; the proxy has not registered it yet
	first := killReaper(t, r)
	r.prepare("w_other_b") // the write fails: a new reaper is started
	if reaperProcess(t, r) == first {
		t.Fatal("no new reaper was started")
	}
	r.notStarted("w_other_b")
	// EOF with the script still unregistered, as when the proxy dies.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the starting script to be killed by the new reaper", func() bool { return pidtest.Gone(script) }, 10*time.Second)
	waitFor(t, "the new reaper to say so", func() bool { return strings.Contains(said(), killedLine(script)) }, 10*time.Second)
}

// TestAScriptThatDoesNotStartIsNoLongerStarting: a unit whose script could
// not be started is called off with the reaper ("! WORK_ID", with the next
// write) and forgotten: else every failed start would stay in the proxy's
// memory, and the reaper of a proxy that dies would look for each of them.
func TestAScriptThatDoesNotStartIsNoLongerStarting(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestReaper(t)
	dir := t.TempDir()
	if err := writeFileNoFork(filepath.Join(dir, "s.sh"), []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := Spec{ScriptsDir: dir, Script: "s.sh", Deadline: time.Now().Add(30 * time.Second), Reaper: r,
		WorkID: "w_no_start", Env: map[string]string{WorkIDVar: "w_no_start"}}
	if _, err := Run(context.Background(), spec); !errors.Is(err, ErrStart) {
		t.Fatalf("Run: %v, want ErrStart", err)
	}
	r.mu.Lock()
	starting, gone := len(r.starting), string(r.gone)
	r.mu.Unlock()
	if starting != 0 || gone != "! w_no_start\n" {
		t.Errorf("after a failed start the proxy holds %d units starting and is to tell its reaper %q; want none, and \"! w_no_start\"", starting, gone)
	}
}

// killReaper SIGKILLs r's reaper process, waits until it is reaped, and
// returns it.
func killReaper(t *testing.T, r *Reaper) *exec.Cmd {
	t.Helper()
	cmd := reaperProcess(t, r)
	r.mu.Lock()
	exited := r.exited
	r.mu.Unlock()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Reaped, not merely a zombie: the leader of a process of several
	// threads is one while the others still hold its files, the pipe's
	// read end among them.
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed reaper was not reaped within 10s")
	}
	return cmd
}

func newSpecWith(t *testing.T, r *Reaper, body string) Spec {
	spec := newSpec(t, body)
	spec.Reaper = r
	return spec
}

// TestReaperKillsADescendantThatLeftTheSession: when the proxy dies, its
// reaper kills the whole tree of each script still registered (guarantee
// 7), a child that left the script's session with setsid while still the
// script's included.
func TestReaperKillsADescendantThatLeftTheSession(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid command")
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `setsid sleep 600 & echo $! > "$1/child.pid.tmp" && mv "$1/child.pid.tmp" "$1/child.pid"; wait`, "sh", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	child := readPid(t, filepath.Join(dir, "child.pid"))
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	waitFor(t, "the script's child to leave its session", func() bool {
		sid, err := unix.Getsid(child)
		return err == nil && sid == child
	}, 10*time.Second)
	start, err := processStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := serveReaper(strings.NewReader(line("+", cmd.Process.Pid, start)), textLog(&out)); code != 0 {
		t.Errorf("reaper exited %d, want 0; it said %q", code, out.String())
	}
	waitFor(t, "the script's child "+strconv.Itoa(child)+", which left its session, to be gone", func() bool { return pidtest.Gone(child) }, 10*time.Second)
}
