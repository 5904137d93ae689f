//go:build linux

package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/internal/waittest"
)

// EnvBin names the environment variable that hands prebuilt binaries to
// the process tests: an absolute directory holding automator and proxy, and
// race/automator and race/proxy built with -race when a package asks for
// those. `make test` builds them there once for every package; unset, each
// package builds its own.
const EnvBin = "OPSGATE_TEST_BIN"

// Bins are the paths of the binaries a package's tests run, in Dir.
type Bins struct {
	Dir, Automator, Proxy string
	made                  bool // Dir was made for them, and Remove removes it
}

// Remove removes the binaries' directory when Binaries made it (it built
// them, or linked prebuilt ones into it); a directory EnvBin names is left
// alone.
func (b Bins) Remove() {
	if b.made {
		os.RemoveAll(b.Dir)
	}
}

// Binaries returns the automator and proxy binaries of this checkout for a
// package's tests, with -race when race is set. When EnvBin is set they are
// the prebuilt ones it names (race/ under it for race), which must be
// executable files: none is built. When EnvBin is unset they are built into
// a new directory under parent (os.TempDir() when "") named after pattern,
// as os.MkdirTemp names it. A parent that is not "" is where the binaries
// must lie (a service's binary may not be under /tmp): prebuilt ones are
// hard-linked, or else copied, into a new directory there. The caller calls
// b.Remove when it is done.
func Binaries(parent, pattern string, race bool) (Bins, error) {
	src := os.Getenv(EnvBin)
	if src == "" {
		dir, err := os.MkdirTemp(parent, pattern)
		if err != nil {
			return Bins{}, fmt.Errorf("making the binaries' directory: %w", err)
		}
		b := binsIn(dir, true)
		if err := build(dir, race); err != nil {
			b.Remove()
			return Bins{}, err
		}
		return b, nil
	}
	b, err := prebuilt(src, race)
	if err != nil || parent == "" {
		return b, err
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return Bins{}, fmt.Errorf("making the binaries' directory: %w", err)
	}
	in := binsIn(dir, true)
	for _, f := range [][2]string{{b.Automator, in.Automator}, {b.Proxy, in.Proxy}} {
		if err := linkOrCopy(f[0], f[1]); err != nil {
			in.Remove()
			return Bins{}, err
		}
	}
	return in, nil
}

func binsIn(dir string, made bool) Bins {
	return Bins{Dir: dir, Automator: filepath.Join(dir, "automator"), Proxy: filepath.Join(dir, "proxy"), made: made}
}

// prebuilt returns the binaries of src, the value of EnvBin, after checking
// that they are there.
func prebuilt(src string, race bool) (Bins, error) {
	if !filepath.IsAbs(src) {
		return Bins{}, fmt.Errorf("%s=%s is not an absolute path (go test runs each package in its own directory)", EnvBin, src)
	}
	dir, kind, when := src, "automator and proxy", ""
	if race {
		dir, kind, when = filepath.Join(src, "race"), "race-built automator and proxy", " when E2E_RACE or CHAOS_RACE is set"
	}
	b := binsIn(dir, false)
	var problems []string
	for _, path := range []string{b.Automator, b.Proxy} {
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			problems = append(problems, err.Error())
		case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
			problems = append(problems, fmt.Sprintf("%s is not an executable file (mode %v)", path, fi.Mode()))
		}
	}
	if problems != nil {
		return Bins{}, fmt.Errorf("%s=%s should hold the %s binaries (make test builds them there%s): %s", EnvBin, src, kind, when, strings.Join(problems, "; "))
	}
	return b, nil
}

// linkOrCopy makes dst the file src: a hard link, or a copy (executable)
// where src's file system is not dst's.
func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

// build builds the automator and proxy binaries of this checkout into dir,
// with -race when race is set; the chooser's test replaces it.
var build = func(dir string, race bool) error {
	args := []string{"build"}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "-o", dir+string(filepath.Separator),
		"github.com/opsgate/opsgate/automator/cmd/automator",
		"github.com/opsgate/opsgate/proxy/cmd/proxy")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// NoLeaks returns code, the tests' exit code, or 1 when the tests passed but
// left goroutines running (which it reports on stderr after prefix).
func NoLeaks(prefix string, code int) int {
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, prefix+": leaked goroutines:", err)
			return 1
		}
	}
	return code
}

// ---- waiting ----

// Poll reports whether cond became true within timeout, looking every 20ms.
// Only for what a child shows through files, logs and ports.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitFor fails the test unless cond becomes true within timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a server the test starts later (and may restart). It is taken below the
// kernel's range of ports for outgoing connections: a port of that range,
// free a moment ago, may meanwhile be taken by any connection made on the
// machine (a PostgreSQL client's, a relay's), and then stays taken while
// that connection lives.
func FreePort(t testing.TB) int {
	t.Helper()
	low, high := belowEphemeral()
	for range 100 {
		port := low + rand.IntN(high-low+1)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatalf("no free TCP port on 127.0.0.1 in [%d, %d] after 100 tries", low, high)
	return 0
}

// belowEphemeral returns the ports FreePort picks from: the 8,000 ports
// under the kernel's range of ports for outgoing connections
// (net.ipv4.ip_local_port_range), and no lower than 10000.
func belowEphemeral() (low, high int) {
	first := 32768 // the kernel's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				first = n
			}
		}
	}
	high = first - 1
	low = max(high-8000, 10000)
	if high < low {
		return 10000, 20000 // a range starting very low: pick above 10000 anyway
	}
	return low, high
}

// ---- short-lived CLI runs ----

// Result is how a CLI run ended.
type Result struct {
	Code           int // exit code; -1 if it could not run or a signal ended it
	Stdout, Stderr string
	Elapsed        time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d after %v, stdout %q, stderr %q", r.Code, r.Elapsed.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// Run runs path with args to the end, killing it after timeout so a hang
// fails instead of stalling. It never fails the test itself, so it may run
// on any goroutine; when the command could not start, Stderr says why.
func Run(timeout time.Duration, path string, args ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := Result{Code: -1, Elapsed: time.Since(start)}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	} else if err != nil {
		stderr.WriteString(err.Error())
	}
	r.Stdout, r.Stderr = stdout.String(), stderr.String()
	return r
}

// ---- long-running children ----

// Proc is a long-running child (automator serve, proxy run). It leads its
// own process group; its stdout and stderr go to one log file, whose tail is
// printed when the test fails.
type Proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	exit    int // valid once done is closed; -1 if killed by a signal
}

// Start starts path with args as a child named name (in log messages and
// the log file's name). When the test ends it kills the child's whole
// process group, fails the test if the log reports a data race (a -race
// build), and, if the test failed, logs the log's tail.
func Start(t testing.TB, name, path string, args ...string) *Proc {
	t.Helper()
	return StartEnv(t, name, nil, path, args...)
}

// StartEnv is Start with the environment env (KEY=value), or this
// process's when env is nil.
func StartEnv(t testing.TB, name string, env []string, path string, args ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &Proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.exit = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		// The group too: scripts a proxy started in its own group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		waittest.Recv(t, p.done, name+" to exit once killed")
		if strings.Contains(p.Log(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race (E2E_RACE=1 build); see %s", name, logPath)
		}
		if t.Failed() {
			t.Logf("---- tail of %s (%s) ----\n%s", name, logPath, tail(logPath, 40))
		}
	})
	return p
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit code of an ended process (-1 when a signal ended
// it); call it only once Exited reports true.
func (p *Proc) ExitCode() int { return p.exit }

// Signal sends sig to the process itself (not its group).
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signalling %s: %v", p.name, err)
	}
}

// Wait waits up to timeout for the process to end and returns its exit
// code (-1 when a signal ended it).
func (p *Proc) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.exit
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v", p.name, timeout)
		return 0
	}
}

// Kill sends SIGKILL to the process only (what a crash looks like; its
// children, if any, survive) and waits for it.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	p.Signal(t, syscall.SIGKILL)
	p.Wait(t, 10*time.Second)
}

// Log returns everything the process wrote so far.
func (p *Proc) Log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// Tail returns the last n lines of the log.
func (p *Proc) Tail(n int) string { return tail(p.logPath, n) }

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// ---- scripts and their traces ----

// WriteScript writes an executable /bin/sh script into dir and returns its
// path.
func WriteScript(t testing.TB, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	WriteExecutable(t, path, []byte("#!/bin/sh\n"+body+"\n"))
	return path
}

// WriteExecutable writes data to path, mode 0755, with no process forked
// meanwhile (every fork takes syscall.ForkLock): one forked by a test
// running beside it would inherit the file open for writing until its own
// exec, and running the file then would fail with "text file busy"
// (ETXTBSY; a clean-clone run failed so, running a copied proxy binary).
func WriteExecutable(t testing.TB, path string, data []byte) {
	t.Helper()
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// Lines returns the non-empty lines of a file (none if it does not exist).
func Lines(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
