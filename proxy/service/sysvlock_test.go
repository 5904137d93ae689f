//go:build linux

package service

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/pidtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// The lock of the SysV script's start and stop ($pid_file.lock) against a
// holder that still runs, and one that is a zombie.

// procIdent is the ident the script writes into its lock for pid: "<pid>
// <starttime>", the start time being field 22 of /proc/PID/stat.
func procIdent(t *testing.T, pid int) string {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		t.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		t.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	return strconv.Itoa(pid) + " " + fields[19]
}

// holdLock makes a process that runs (sleep 60) the holder of the script's
// lock, as a start or stop of its own would: its ident in the lock file. The
// process is killed when the test ends, if the test has not killed it.
func (f *sysvFixture) holdLock(t *testing.T) *exec.Cmd {
	t.Helper()
	holder := exec.Command("sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	if err := os.WriteFile(f.pidFile+".lock", []byte(procIdent(t, holder.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return holder
}

// sleepSpy writes a sleep into a new directory bin of the fixture's, for the
// front of PATH, that marks which process called it (the file
// slept-by-PPID) before it sleeps. A start or stop sleeps while it waits for
// the lock; a wait for the lock is seen then, not guessed at with a delay.
func (f *sysvFixture) sleepSpy(t *testing.T) string {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(f.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	spy := "#!/bin/sh\n: >" + shQuote(f.dir) + "/slept-by-$PPID\nexec " + shQuote(sleep) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "sleep"), []byte(spy), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// slept says whether the process pid has called sleepSpy's sleep.
func (f *sysvFixture) slept(pid int) bool {
	_, err := os.Stat(filepath.Join(f.dir, "slept-by-"+strconv.Itoa(pid)))
	return err == nil
}

// sysvRun is an action of the init script run in the background.
type sysvRun struct {
	cmd     *exec.Cmd
	outPath string
	done    chan struct{} // closed once it has returned
}

// background runs the init script with an action in the background, with bin
// at the front of its PATH. Its output goes to a file, written as the script
// writes it: what is in it when the script sleeps was written before. If it
// still runs when the test ends, it is killed then.
func (f *sysvFixture) background(t *testing.T, action, bin string) *sysvRun {
	t.Helper()
	r := &sysvRun{outPath: filepath.Join(f.dir, action+".out"), done: make(chan struct{})}
	out, err := os.Create(r.outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	r.cmd = exec.Command(f.script, action)
	r.cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	r.cmd.Stdout, r.cmd.Stderr = out, out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		if !r.ended() {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

func (r *sysvRun) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *sysvRun) output() string {
	out, _ := os.ReadFile(r.outPath)
	return string(out)
}

// wait waits for the run to return, and returns its exit code and output.
func (r *sysvRun) wait(t *testing.T, what string) (int, string) {
	t.Helper()
	waittest.Recv(t, r.done, what)
	return r.cmd.ProcessState.ExitCode(), r.output()
}

// TestSysVScriptStartWaitsForALiveHolderOfTheLock: a start finding the lock
// held by a process that still runs (another start, or a stop that takes up
// to the stop timeout) does not take it over: it waits, starting nothing,
// and once the holder is gone takes the lock and starts the service.
func TestSysVScriptStartWaitsForALiveHolderOfTheLock(t *testing.T) {
	f := newSysV(t, "graceful", time.Second)
	holder := f.holdLock(t)
	start := f.background(t, "start", f.sleepSpy(t))
	// Its first sleep is that of a start that found the lock held; a start
	// that took it has written the pid file before it sleeps (waiting for
	// its supervisor), or has returned without sleeping.
	waittest.Until(t, "the start to wait for the lock, or to return", func() bool {
		return f.slept(start.cmd.Process.Pid) || start.ended()
	})
	if start.ended() {
		t.Fatalf("start returned (exit %d %q) while a live process held the lock", start.cmd.ProcessState.ExitCode(), start.output())
	}
	if _, err := os.Stat(f.pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("start wrote the pid file (%v) while a live process held the lock: %q", err, start.output())
	}
	if pids := supervisors(t, f.script); len(pids) != 0 {
		t.Fatalf("start started supervisors %v while a live process held the lock", pids)
	}

	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	if code, out := start.wait(t, "the start to return once the holder of the lock is gone"); code != 0 || !strings.Contains(out, "Started") {
		t.Fatalf("start once the holder of the lock is gone: exit %d %q, want it started", code, out)
	}
	f.stopStarted(t)
}

// TestSysVScriptStopWaitsForALiveHolderOfTheLock: a stop finding the lock
// held by a process that still runs (a start on its way to starting a
// supervisor, which the stop would miss) waits, signalling nothing, and once
// the holder is gone stops the service.
func TestSysVScriptStopWaitsForALiveHolderOfTheLock(t *testing.T) {
	f := newSysV(t, "graceful", time.Second)
	if err := os.WriteFile(filepath.Join(f.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	service := f.start(t)
	holder := f.holdLock(t)
	stop := f.background(t, "stop", f.sleepSpy(t))
	// Its first sleep is that of a stop that found the lock held; a stop
	// that went on has said "Stopping" and signalled the supervisor before
	// it sleeps (waiting for it to end), or has returned.
	waittest.Until(t, "the stop to wait for the lock, or to return", func() bool {
		return f.slept(stop.cmd.Process.Pid) || stop.ended()
	})
	if stop.ended() {
		t.Fatalf("stop returned (exit %d %q) while a live process held the lock", stop.cmd.ProcessState.ExitCode(), stop.output())
	}
	if out := stop.output(); strings.Contains(out, "Stopping") {
		t.Fatalf("stop went on while a live process held the lock: %q", out)
	}
	if f.count("term") != 0 || pidtest.Gone(service) {
		t.Fatalf("the service was stopped (events %q) while a live process held the lock", f.events())
	}

	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	if code, out := stop.wait(t, "the stop to return once the holder of the lock is gone"); code != 0 || !strings.Contains(out, "Stopped") {
		t.Fatalf("stop once the holder of the lock is gone: exit %d %q, want it stopped", code, out)
	}
	if !pidtest.Gone(service) {
		t.Fatal("stop returned while the service still runs")
	}
	if code, out := f.run(t, "status"); code != 3 {
		t.Fatalf("status after stop: exit %d %q, want 3", code, out)
	}
	f.noLockLeft(t)
}

// TestSysVScriptTakesOverTheLockOfAZombie: a start or stop killed while it
// holds the lock stays a zombie until it is reaped, seconds where PID 1
// reaps late and forever where it does not reap; a zombie holder is gone,
// and the next start takes its lock over instead of waiting for it and
// giving up.
func TestSysVScriptTakesOverTheLockOfAZombie(t *testing.T) {
	f := newSysV(t, "graceful", time.Second)
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = zombie.Wait() }() // reaped only at the end: a zombie meanwhile
	waittest.Until(t, "the exited child to be a zombie", func() bool { return procState(zombie.Process.Pid) == "Z" })
	if err := os.WriteFile(f.pidFile+".lock", []byte(procIdent(t, zombie.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Bounded: the script gives up on a lock held after stop_timeout + 10
	// seconds, which the bound is well above.
	start := exec.CommandContext(waittest.Context(t, "start over the lock of a zombie to return"), f.script, "start")
	start.WaitDelay = time.Second
	out, err := start.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s start: %v", f.script, err)
	}
	if code := start.ProcessState.ExitCode(); code != 0 || !strings.Contains(string(out), "Started") || strings.Contains(string(out), "another start or stop holds") {
		t.Fatalf("start over the lock of a zombie: exit %d %q, want it started", code, out)
	}
	if procState(zombie.Process.Pid) != "Z" {
		t.Fatal("the holder of the lock was not a zombie throughout")
	}
	f.stopStarted(t)
}
