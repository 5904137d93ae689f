//go:build linux

package e2e

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/waittest"
)

// sleeperScript sleeps with a background child, after writing both pids
// (child first) to the file named by its first argument. exec keeps the pid:
// the script's own pid is the sleeping process.
const sleeperScript = `sleep 60 &
echo "$! $$" > "$1.tmp" && mv "$1.tmp" "$1"
exec sleep 60`

// `automator exec` exits with the remote exit code, or with 124 (timed
// out), 125 (the proxy could not run it), 126 (cancelled) and 255 (its own
// errors), each with a one-line reason.
func TestExecExitCodes(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := withSettings(t, a.createAccount(t, "acme"), "max_concurrency: 8")
	scripts, dir := t.TempDir(), t.TempDir()
	writeScript(t, scripts, "exit.sh", `exit "$1"`)
	writeScript(t, scripts, "sleeper.sh", sleeperScript)
	startProxy(t, cfg, scripts, "a").WaitPolling(t)
	wrongKey := filepath.Join(dir, "wrong.apikey")
	writeFile(t, wrongKey, "oak_this-is-not-the-key\n")

	oneLine := func(t *testing.T, r result, want string) {
		t.Helper()
		if strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr %q: want one line containing %q", r.Stderr, want)
		}
	}

	t.Run("remote 0", func(t *testing.T) {
		t.Parallel()
		if r := a.Exec("--account", "acme", "--timeout", "20s", "exit.sh", "0"); r.Code != 0 || r.Stderr != "" {
			t.Errorf("exec: %v; want exit 0, no stderr", r)
		}
	})
	t.Run("remote 42", func(t *testing.T) {
		t.Parallel()
		if r := a.Exec("--account", "acme", "--timeout", "20s", "exit.sh", "42"); r.Code != 42 || r.Stderr != "" {
			t.Errorf("exec: %v; want exit 42, no stderr", r)
		}
	})
	t.Run("124 timed out", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		killPIDFilesAtCleanup(t, pidFile)
		r := a.Exec("--account", "acme", "--timeout", "1s", "sleeper.sh", pidFile)
		if r.Code != 124 {
			t.Errorf("exec: %v; want exit 124", r)
		}
		oneLine(t, r, "timed out")
	})
	t.Run("125 unknown script", func(t *testing.T) {
		t.Parallel()
		r := a.Exec("--account", "acme", "--timeout", "20s", "nope.sh")
		if r.Code != 125 {
			t.Errorf("exec: %v; want exit 125", r)
		}
		oneLine(t, r, "unknown script")
	})
	// Ctrl-C, or the terminal exec ran in closed (an SSH session
	// dropped): the unit is cancelled, not left to run unobserved.
	for _, sig := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGINT", syscall.SIGINT}, {"SIGHUP", syscall.SIGHUP}} {
		t.Run("126 cancelled by "+sig.name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			killPIDFilesAtCleanup(t, pidFile)
			bg := a.StartExec(t, "--account", "acme", "--timeout", "30s", "sleeper.sh", pidFile)
			waitFor(t, 10*time.Second, "the script to start", func() bool { return exists(pidFile) })
			pids := readPIDs(t, pidFile)
			bg.Signal(t, sig.sig)
			r := bg.Wait(t, 10*time.Second)
			if r.Code != 126 {
				t.Fatalf("exec: %v; want exit 126", r)
			}
			oneLine(t, r, "cancelled")
			if !poll(5*time.Second, func() bool { return allGone(pids) }) {
				t.Fatalf("5s after the cancel the script or its child (pids %v) still runs; %s", pids, treeNotKilled)
			}
		})
	}
	t.Run("255 bad flag", func(t *testing.T) {
		t.Parallel()
		r := a.Exec("--no-such-flag", "--account", "acme", "exit.sh", "0")
		if r.Code != 255 || !strings.Contains(r.Stderr, "no-such-flag") {
			t.Fatalf("exec: %v; want exit 255 naming the flag", r)
		}
		if strings.Count(r.Stderr, "\n") != 1 {
			// DESIGN.md: 255 "for its own errors (flags, connection, auth),
			// each with a one-line reason on stderr".
			t.Fatalf("a bad flag printed %d lines on stderr, want one:\n%s", strings.Count(r.Stderr, "\n"), r.Stderr)
		}
	})
	t.Run("255 unknown account", func(t *testing.T) {
		t.Parallel()
		r := a.Exec("--account", "nobody", "--timeout", "20s", "exit.sh", "0")
		if r.Code != 255 {
			t.Errorf("exec: %v; want exit 255", r)
		}
		oneLine(t, r, "nobody")
	})
	t.Run("255 wrong API key", func(t *testing.T) {
		t.Parallel()
		r := runCLI(bin.automator, "exec", "--server", a.publicURL(), "--api-key-file", wrongKey,
			"--ca", filepath.Join(a.DataDir, "ca.pem"), "--account", "acme", "--timeout", "20s", "exit.sh", "0")
		if r.Code != 255 {
			t.Errorf("exec: %v; want exit 255", r)
		}
		oneLine(t, r, "Unauthenticated")
	})
}

// A cancelled unit's script is killed at once even when its proxy has no
// free slot (it must still hear about the cancel, not wait for the deadline).
func TestCancelKillsScriptEvenWhenProxyIsBusy(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := withSettings(t, a.createAccount(t, "acme"), "max_concurrency: 1")
	scripts := t.TempDir()
	writeScript(t, scripts, "sleeper.sh", sleeperScript)
	startProxy(t, cfg, scripts, "a").WaitPolling(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	killPIDFilesAtCleanup(t, pidFile)

	bg := a.StartExec(t, "--account", "acme", "--timeout", "30s", "sleeper.sh", pidFile)
	waitFor(t, 10*time.Second, "the script to start", func() bool { return exists(pidFile) })
	pids := readPIDs(t, pidFile)
	bg.Signal(t, syscall.SIGINT)
	if r := bg.Wait(t, 10*time.Second); r.Code != 126 {
		t.Fatalf("exec: %v; want exit 126", r)
	}
	if !poll(5*time.Second, func() bool { return allGone(pids) }) {
		t.Fatalf("5s after the cancel the script or its child (pids %v) on the busy proxy still runs; "+
			"the proxy must learn of cancels while all its slots are taken, and %s", pids, treeNotKilled)
	}
}

// TestASecondCtrlCEndsExecAtOnce: the first Ctrl-C asks exec to end, and
// exec may then wait, within its bounds, for an automator that does not
// answer (the answer of a submit on its way, then the cancel of its unit:
// 10 s each). A second Ctrl-C ends it at once. The automator here accepts
// the connection and never answers.
func TestASecondCtrlCEndsExecAtOnce(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never read
		}
	}()
	t.Cleanup(func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	})
	bg := startCLI(t, bin.automator, "exec", "--server", "https://"+hung.Addr().String(),
		"--api-key-file", filepath.Join(a.DataDir, config.FileAPIKey), "--ca", filepath.Join(a.DataDir, config.FileCACert),
		"--account", "acme", "x.sh")
	c := waittest.Recv(t, accepted, "exec to connect to the automator that never answers")
	accepted <- c
	bg.Signal(t, syscall.SIGINT)
	// The first is caught: exec waits for the automator's answer to its
	// submit, to cancel the unit (10 s here). Whether the process has
	// handled it yet shows nowhere, so the next is sent again until one
	// ends the process; without the second's default effect, none would
	// for those 10 s.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(5 * time.Second)
	for {
		select {
		case <-bg.done:
			// Killed by it; or, started with SIGINT ignored (a test
			// run in the background of a script), exit 130
			// (stopsignal.Stopping).
			if r := bg.res; r.Code != -1 && r.Code != 130 {
				t.Errorf("exec after a second Ctrl-C: %v; want it ended by the signal", r)
			}
			return
		case <-tick.C:
			_ = bg.cmd.Process.Signal(syscall.SIGINT)
		case <-giveUp:
			t.Fatalf("exec still ran 5 s after a second Ctrl-C; want it ended at once")
		}
	}
}

// TestASecondCtrlCWhileTheCancelWaitsSaysHowToFollowTheUnit: once exec's
// unit is queued, the first Ctrl-C cancels it; when the automator is slow
// to answer the cancel (stopped here, SIGSTOP), exec says, after a
// second, what it waits for and what a second Ctrl-C does. The second
// ends exec at once, by SIGINT, saying which unit it leaves, until when
// it may run, and how to follow or end it (a review: it ended without a
// word, the unit running on, its id nowhere).
func TestASecondCtrlCWhileTheCancelWaitsSaysHowToFollowTheUnit(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "sleeper.sh", sleeperScript)
	startProxy(t, cfg, scripts, "a").WaitPolling(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	killPIDFilesAtCleanup(t, pidFile)
	stderr := filepath.Join(t.TempDir(), "stderr")
	errf, err := os.Create(stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	cmd := exec.Command(bin.automator, "exec", "--data-dir", a.DataDir, "--account", "acme", "--timeout", "60s", "sleeper.sh", pidFile)
	cmd.Stderr = errf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		waittest.Recv(t, done, "exec to end once killed")
	})
	said := func() string { b, _ := os.ReadFile(stderr); return string(b) }
	waitFor(t, 10*time.Second, "the script to start", func() bool { return exists(pidFile) })

	a.proc.Signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { a.proc.Signal(t, syscall.SIGCONT) })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "exec to say that it cancels the unit and what a second Ctrl-C does", func() bool {
		return strings.Contains(said(), "automator: interrupted: cancelling work w_")
	})
	if l := said(); strings.Count(l, "\n") != 1 || !strings.Contains(l, "which is taking a while; interrupt again to stop waiting and leave it to run until its deadline at ") {
		t.Fatalf("exec said %q after the first Ctrl-C; want one line saying it cancels the unit, and what a second Ctrl-C does", l)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waittest.Recv(t, done, "exec to end at the second Ctrl-C")
	done <- nil // for the cleanup
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		// Started with SIGINT ignored (a test run in the background of
		// a script), it exits 130 instead (stopsignal.Stopping).
		if cmd.ProcessState.ExitCode() != 130 {
			t.Errorf("exec after a second Ctrl-C: %v; want it ended by SIGINT", cmd.ProcessState)
		}
	}
	lines := strings.Split(strings.TrimSpace(said()), "\n")
	id := strings.Fields(strings.TrimPrefix(lines[0], "automator: interrupted: cancelling work "))[0]
	id = strings.TrimSuffix(id, ",")
	want := "automator: interrupted again: stopped waiting for its cancel; work " + id + " was queued and may still run until its deadline at "
	if len(lines) != 2 || !strings.HasPrefix(lines[1], want) ||
		!strings.Contains(lines[1], "follow it with `automator work wait "+id+" --data-dir "+a.DataDir+"`, or end it with `automator work cancel "+id+" --data-dir "+a.DataDir+"`") {
		t.Errorf("exec's last words after the second Ctrl-C: %q; want them to begin %q and say how to follow and end it", lines[1:], want)
	}
}

// TestASecondCtrlCWhileExecWritesAnEndedUnitsOutputSaysNothingOfIt: once
// its unit has ended, exec has no unit to leave: a second Ctrl-C while it
// still writes the output (its reader slow) ends it without saying that
// the unit may still run, or how to cancel it (a review: it did).
func TestASecondCtrlCWhileExecWritesAnEndedUnitsOutputSaysNothingOfIt(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "loud.sh", `head -c 1000000 /dev/zero`)
	startProxy(t, cfg, scripts, "a").WaitPolling(t)
	// A stdout nobody reads: exec blocks writing the output.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stderr := filepath.Join(t.TempDir(), "stderr")
	errf, err := os.Create(stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	cmd := exec.Command(bin.automator, "exec", "--data-dir", a.DataDir, "--account", "acme", "--timeout", "60s", "loud.sh")
	cmd.Stdout, cmd.Stderr = w, errf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done; done <- nil })
	// The first byte of the output: exec has the unit's end, and writes
	// the rest into a pipe no one reads. (Not the unit's end in the
	// database: exec may not have its answer yet, and then rightly says
	// the unit may still run; CI, on a loaded machine, once did.)
	if err := r.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
		t.Fatalf("exec's output did not begin: %v", err)
	}
	// The first is caught; whether it was handled yet shows nowhere, so
	// the next is sent again until one ends exec.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(10 * time.Second)
	_ = cmd.Process.Signal(syscall.SIGINT)
	for ended := false; !ended; {
		select {
		case <-done:
			ended = true
			done <- nil
		case <-tick.C:
			_ = cmd.Process.Signal(syscall.SIGINT)
		case <-giveUp:
			t.Fatal("exec still ran 10 s after its second Ctrl-C")
		}
	}
	if b, _ := os.ReadFile(stderr); strings.Contains(string(b), "may still run") || strings.Contains(string(b), "work cancel") {
		t.Errorf("exec said %q at a second Ctrl-C after its unit ended; want nothing of a unit that may still run", b)
	}
}
