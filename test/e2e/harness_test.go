//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/config"
)

// bin holds the paths of the binaries TestMain built.
var bin struct{ automator, proxy string }

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode (it builds and runs the real binaries)")
		return 0
	}
	dir, err := os.MkdirTemp("", "opsgate-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: making the binaries' directory:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	args := []string{"build"}
	if os.Getenv("E2E_RACE") != "" {
		args = append(args, "-race")
	}
	args = append(args, "-o", dir+string(filepath.Separator),
		"github.com/opsgate/opsgate/automator/cmd/automator",
		"github.com/opsgate/opsgate/proxy/cmd/proxy")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 2
	}
	bin.automator = filepath.Join(dir, "automator")
	bin.proxy = filepath.Join(dir, "proxy")

	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// ---- waiting ----

// poll reports whether cond became true within timeout, looking every 20ms.
func poll(timeout time.Duration, cond func() bool) bool {
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

// waitFor fails the test unless cond becomes true within timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// ---- child processes ----

// proc is a long-running child (automator serve, proxy run). It leads its
// own process group; its stdout and stderr go to one log file, whose tail is
// printed when the test fails.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	exit    int // valid once done is closed; -1 if killed by a signal
}

func startProc(t *testing.T, name, path string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.exit = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		// The group too: scripts a proxy started in its own group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if strings.Contains(p.Log(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race (E2E_RACE=1 build); see %s", name, logPath)
		}
		if t.Failed() {
			t.Logf("---- tail of %s (%s) ----\n%s", name, logPath, tail(logPath, 40))
		}
	})
	return p
}

// Exited reports whether the process has ended.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process itself (not its group).
func (p *proc) Signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signalling %s: %v", p.name, err)
	}
}

// Wait waits up to timeout for the process to end and returns its exit
// code (-1 when a signal ended it).
func (p *proc) Wait(t *testing.T, timeout time.Duration) int {
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
func (p *proc) Kill(t *testing.T) {
	t.Helper()
	p.Signal(t, syscall.SIGKILL)
	p.Wait(t, 10*time.Second)
}

// Log returns everything the process wrote so far.
func (p *proc) Log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

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

// ---- the automator ----

type automator struct {
	DataDir  string
	GRPCAddr string // 127.0.0.1:PORT, also the public URL's host and port
	HTTPAddr string
	port     int
	proc     *proc
	serves   int
}

// startAutomator initialises a data directory and serves it. The gRPC port is
// picked up front because the public URL (and so every profile) names it.
func startAutomator(t *testing.T) *automator {
	t.Helper()
	a := &automator{DataDir: filepath.Join(t.TempDir(), "data"), port: freePort(t)}
	if r := runCLI(bin.automator, "init", "--data-dir", a.DataDir, "--public-url", a.publicURL()); r.code != 0 {
		t.Fatalf("automator init: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := a.serve(t); err != nil {
		// Most likely someone took the port between freePort and serve: move
		// the public URL to another port, once. No profile exists yet.
		t.Logf("serve failed (%v); retrying on another port", err)
		a.port = freePort(t)
		cfg, err := config.Load(a.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		cfg.PublicURL = a.publicURL()
		cfg.Listen = fmt.Sprintf("127.0.0.1:%d", a.port)
		if err := config.Save(a.DataDir, cfg); err != nil {
			t.Fatal(err)
		}
		if err := a.serve(t); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (a *automator) publicURL() string { return fmt.Sprintf("https://127.0.0.1:%d", a.port) }

// serve starts `automator serve` and waits until /healthz answers.
func (a *automator) serve(t *testing.T) error {
	t.Helper()
	_ = os.Remove(filepath.Join(a.DataDir, config.FileServing))
	a.serves++
	a.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", a.port)
	p := startProc(t, fmt.Sprintf("automator-%d", a.serves), bin.automator, "serve",
		"--data-dir", a.DataDir, "--listen", a.GRPCAddr, "--http-listen", "127.0.0.1:0")
	a.proc = p
	var s config.Serving
	ok := poll(15*time.Second, func() bool {
		if p.Exited() {
			return true
		}
		var found bool
		s, found, _ = config.ReadServing(a.DataDir)
		return found
	})
	switch {
	case p.Exited():
		return fmt.Errorf("automator serve exited with %d: %s", p.exit, tail(p.logPath, 5))
	case !ok:
		return errors.New("automator serve wrote no serving.yaml within 15s")
	case s.GRPC != a.GRPCAddr:
		return fmt.Errorf("serving.yaml says gRPC is on %q, want %q", s.GRPC, a.GRPCAddr)
	}
	a.HTTPAddr = s.HTTP
	client := &http.Client{Timeout: time.Second}
	if !poll(15*time.Second, func() bool {
		resp, err := client.Get("http://" + a.HTTPAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		return fmt.Errorf("GET http://%s/healthz did not answer 200 within 15s", a.HTTPAddr)
	}
	client.CloseIdleConnections()
	return nil
}

// Kill crashes the automator (SIGKILL).
func (a *automator) Kill(t *testing.T) {
	t.Helper()
	a.proc.Kill(t)
}

// Restart serves the same data directory on the same gRPC port again.
func (a *automator) Restart(t *testing.T) {
	t.Helper()
	var err error
	for range 3 {
		if err = a.serve(t); err == nil {
			return
		}
		t.Logf("restart: %v; retrying", err)
	}
	t.Fatalf("restarting the automator: %v", err)
}

// Log returns the current serve process's log.
func (a *automator) Log() string { return a.proc.Log() }

// createAccount makes an account and returns the path of its proxy config.
func (a *automator) createAccount(t *testing.T, name string) string {
	t.Helper()
	r := runCLI(bin.automator, "account", "create", name, "--data-dir", a.DataDir)
	if r.code != 0 {
		t.Fatalf("automator account create %s: exit %d: %s", name, r.code, r.stderr)
	}
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Exec runs `automator exec --data-dir D ARGS...` to the end. It never fails
// the test itself, so it may run on any goroutine.
func (a *automator) Exec(args ...string) result {
	return runCLI(bin.automator, append([]string{"exec", "--data-dir", a.DataDir}, args...)...)
}

// StartExec runs `automator exec --data-dir D ARGS...` in the background.
func (a *automator) StartExec(t *testing.T, args ...string) *bgExec {
	t.Helper()
	return startCLI(t, bin.automator, append([]string{"exec", "--data-dir", a.DataDir}, args...)...)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ---- short-lived CLI runs ----

// cliTimeout bounds any one CLI run, so a hang fails instead of stalling.
const cliTimeout = 2 * time.Minute

type result struct {
	code           int // exit code; -1 if it could not run or a signal ended it
	stdout, stderr string
	elapsed        time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v, stdout %q, stderr %q", r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
}

func runCLI(path string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{code: -1, elapsed: time.Since(start)}
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
	} else if err != nil {
		stderr.WriteString(err.Error())
	}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	return r
}

// bgExec is a CLI run in the background.
type bgExec struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	start          time.Time
	done           chan struct{}
	res            result
}

func startCLI(t *testing.T, path string, args ...string) *bgExec {
	t.Helper()
	b := &bgExec{name: filepath.Base(path) + " " + args[0], cmd: exec.Command(path, args...), done: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	b.start = time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", b.name, err)
	}
	go func() {
		_ = b.cmd.Wait()
		b.res = result{
			code:    b.cmd.ProcessState.ExitCode(),
			stdout:  b.stdout.String(),
			stderr:  b.stderr.String(),
			elapsed: time.Since(b.start),
		}
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// Wait returns the run's result, failing the test if it takes longer than
// timeout.
func (b *bgExec) Wait(t *testing.T, timeout time.Duration) result {
	t.Helper()
	select {
	case <-b.done:
		return b.res
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v", b.name, timeout)
		return result{}
	}
}

// Signal sends sig to the CLI process.
func (b *bgExec) Signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %s: %v", b.name, err)
	}
}

// ---- proxies ----

type proxy struct {
	*proc
	InstanceID string
}

// startProxy runs `proxy run` for one instance.
func startProxy(t *testing.T, cfgPath, scriptsDir, instanceID string) *proxy {
	t.Helper()
	p := startProc(t, "proxy-"+instanceID, bin.proxy, "run",
		"--config", cfgPath, "--scripts-dir", scriptsDir, "--instance-id", instanceID)
	return &proxy{proc: p, InstanceID: instanceID}
}

// WaitPolling waits until the instance says it is connected and polling.
func (p *proxy) WaitPolling(t *testing.T) {
	t.Helper()
	waitFor(t, 15*time.Second, p.name+" to start polling", func() bool {
		return strings.Contains(p.Log(), "connected to the automator; polling") || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("%s exited with %d before polling", p.name, p.exit)
	}
}

// Stop sends SIGTERM and waits for the proxy to exit; it returns the exit
// code.
func (p *proxy) Stop(t *testing.T, timeout time.Duration) int {
	t.Helper()
	p.Signal(t, syscall.SIGTERM)
	return p.Wait(t, timeout)
}

// withSettings writes a copy of a proxy config with local settings added.
func withSettings(t *testing.T, cfgPath string, lines ...string) string {
	t.Helper()
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, []byte(strings.Join(lines, "\n")+"\n")...)
	path := filepath.Join(t.TempDir(), filepath.Base(cfgPath))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// profileValue returns the value of a top-level "key: value" line.
func profileValue(t *testing.T, cfgPath, key string) string {
	t.Helper()
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no %q line", cfgPath, key)
	return ""
}

// ---- scripts and their traces ----

// writeScript writes an executable /bin/sh script.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// lines returns the non-empty lines of a file (none if it does not exist).
func lines(path string) []string {
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

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readPIDs reads the pids a script wrote (atomically, with a rename).
func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading pid file: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 {
			t.Fatalf("pid file %s holds %q", path, data)
		}
		pids = append(pids, pid)
	}
	if len(pids) == 0 {
		t.Fatalf("pid file %s is empty", path)
	}
	return pids
}

// allGone reports whether none of pids runs any more.
func allGone(pids []int) bool {
	for _, pid := range pids {
		if !processGone(pid) {
			return false
		}
	}
	return true
}

// processGone reports whether pid no longer runs. A zombie counts as gone:
// it has been killed and only waits for a reaper (an orphan's reaper here may
// be a PID 1 that never reaps).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// killPIDFilesAtCleanup kills, when the test ends, the processes whose pids
// scripts wrote to these files, so a long sleep never outlives its test.
func killPIDFilesAtCleanup(t *testing.T, paths ...string) {
	t.Cleanup(func() {
		for _, path := range paths {
			data, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
}
