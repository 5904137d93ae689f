//go:build linux

package e2e

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/pidtest"
	"github.com/opsgate/opsgate/internal/proctest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// bin holds the paths of the binaries TestMain found or built.
var bin struct{ automator, proxy string }

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode (it builds and runs the real binaries)")
		return 0
	}
	b, err := proctest.Binaries("", "opsgate-e2e-bin-", os.Getenv("E2E_RACE") != "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 2
	}
	defer b.Remove()
	bin.automator, bin.proxy = b.Automator, b.Proxy
	if signal.Ignored(syscall.SIGHUP) {
		// Run with SIGHUP ignored (under nohup, or a runner that ignores
		// it), the commands started here would inherit it, and exec would
		// not stop on the one TestExecExitCodes sends: catching it here
		// (and dropping it, as ignoring did) starts them with its default.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
	return proctest.NoLeaks("e2e", m.Run())
}

// The shared harness under the names these tests use.
var (
	poll        = proctest.Poll
	waitFor     = proctest.WaitFor
	freePort    = proctest.FreePort
	writeScript = proctest.WriteScript
	lines       = proctest.Lines
	processGone = pidtest.Gone
)

type result = proctest.Result

// ---- the automator ----

type automator struct {
	DataDir  string
	GRPCAddr string // 127.0.0.1:PORT, also the public URL's host and port
	HTTPAddr string
	port     int
	proc     *proctest.Proc
	serves   int
}

// startAutomator initialises a data directory and serves it. The gRPC port is
// picked up front because the public URL (and so every profile) names it.
func startAutomator(t *testing.T) *automator {
	t.Helper()
	return startAutomatorIn(t, t.TempDir())
}

// startAutomatorIn is startAutomator with the data directory made in parent.
func startAutomatorIn(t *testing.T, parent string) *automator {
	t.Helper()
	a := &automator{DataDir: filepath.Join(parent, "data"), port: freePort(t)}
	if r := runCLI(bin.automator, "init", "--data-dir", a.DataDir, "--public-url", a.publicURL()); r.Code != 0 {
		t.Fatalf("automator init: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// The port was free when freePort looked; another process may bind it
	// before serve does. Only then move the public URL to another port (no
	// profile names it yet) and serve again.
	for try := 1; ; try++ {
		err := a.serve(t)
		if err == nil {
			return a
		}
		if !errors.Is(err, proctest.ErrAddrInUse) || try == 3 {
			t.Fatal(err)
		}
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
	}
}

func (a *automator) publicURL() string { return fmt.Sprintf("https://127.0.0.1:%d", a.port) }

// serve starts `automator serve` and waits until /healthz answers.
func (a *automator) serve(t *testing.T) error {
	t.Helper()
	_ = os.Remove(filepath.Join(a.DataDir, config.FileServing))
	a.serves++
	a.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", a.port)
	p := proctest.Start(t, fmt.Sprintf("automator-%d", a.serves), bin.automator, "serve",
		"--data-dir", a.DataDir, "--listen", a.GRPCAddr, "--http-listen", "127.0.0.1:0")
	a.proc = p
	s, err := proctest.WaitServing(p, a.DataDir, 15*time.Second)
	switch {
	case err != nil:
		return err
	case s.GRPC != a.GRPCAddr:
		return fmt.Errorf("serving.yaml says gRPC is on %q, want %q", s.GRPC, a.GRPCAddr)
	}
	a.HTTPAddr = s.HTTP
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
	profile := proctest.CreateAccount(t, bin.automator, a.DataDir, name)
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
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

// ---- short-lived CLI runs ----

// cliTimeout bounds any one CLI run, so a hang fails instead of stalling.
const cliTimeout = 2 * time.Minute

func runCLI(path string, args ...string) result {
	return proctest.Run(cliTimeout, path, args...)
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
			Code:    b.cmd.ProcessState.ExitCode(),
			Stdout:  b.stdout.String(),
			Stderr:  b.stderr.String(),
			Elapsed: time.Since(b.start),
		}
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		waittest.Recv(t, b.done, b.name+" to exit once killed")
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
	*proctest.Proc
	InstanceID string
}

// startProxy runs `proxy run` for one instance.
func startProxy(t *testing.T, cfgPath, scriptsDir, instanceID string) *proxy {
	t.Helper()
	p := proctest.StartProxy(t, bin.proxy, cfgPath, scriptsDir, instanceID)
	return &proxy{Proc: p, InstanceID: instanceID}
}

// WaitPolling waits until the instance says it is connected and polling.
func (p *proxy) WaitPolling(t *testing.T) {
	t.Helper()
	proctest.WaitPolling(t, p.Proc, 15*time.Second)
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
