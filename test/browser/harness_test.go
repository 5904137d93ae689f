//go:build linux

package browser

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
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/config"
)

// bin holds the binaries TestMain built; chromium is the browser's path.
var (
	bin      struct{ automator, proxy string }
	chromium string
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("browser: skipped in -short mode (it runs the real binaries and Chromium)")
		return 0
	}
	path, err := findChromium()
	if err != nil {
		if os.Getenv("AUTOMATOR_REQUIRE_BROWSER") != "" {
			fmt.Fprintf(os.Stderr, "browser: %v (AUTOMATOR_REQUIRE_BROWSER is set, so this fails)\n", err)
			return 1
		}
		fmt.Printf("browser: SKIPPED: %v\n", err)
		return 0
	}
	chromium = path
	dir, err := os.MkdirTemp("", "opsgate-browser-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser: making the binaries' directory:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	args := []string{"build", "-o", dir + string(filepath.Separator),
		"github.com/opsgate/opsgate/automator/cmd/automator", "github.com/opsgate/opsgate/proxy/cmd/proxy"}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "browser: go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 2
	}
	bin.automator = filepath.Join(dir, "automator")
	bin.proxy = filepath.Join(dir, "proxy")
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "browser: leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// findChromium returns Debian's Chromium, installing it with
// scripts/chromium.sh (as root) when it is missing.
func findChromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "chromium.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("no Chromium: %s", strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// ---- child processes ----

// proc is a long-running child (automator serve, proxy run) in its own
// process group, logging to a file whose tail is shown when the test fails.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

func startProc(t *testing.T, name, path string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("---- log of %s ----\n%s", name, data)
		}
	})
	return p
}

// Kill crashes the process (SIGKILL) and waits for it to end.
func (p *proc) Kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not end after SIGKILL", p.name)
	}
}

func (p *proc) Log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// run runs a CLI command to the end and returns its stdout.
func run(t *testing.T, path string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %s: %v", filepath.Base(path), strings.Join(args, " "), err)
	}
	return stdout.String()
}

// waitFor polls cond every 20 ms, for states no channel signals (a file, a
// log line, an HTTP answer).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- the automator ----

type automator struct {
	dir  string
	http string // http://127.0.0.1:PORT
	grpc string
}

// startAutomator initialises a data directory with a 1 s poll window and
// the admin key allowed to see commands on the dashboard, and serves it.
func startAutomator(t *testing.T) *automator {
	t.Helper()
	a := &automator{dir: filepath.Join(t.TempDir(), "data")}
	port := freePort(t)
	a.grpc = fmt.Sprintf("127.0.0.1:%d", port)
	run(t, bin.automator, "init", "--data-dir", a.dir, "--public-url", "https://"+a.grpc)
	cfg, err := config.Load(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PollWindow = time.Second
	cfg.DashboardRevealKeys = []string{"admin"}
	if err := config.Save(a.dir, cfg); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "automator", bin.automator, "serve", "--data-dir", a.dir, "--listen", a.grpc, "--http-listen", "127.0.0.1:0")
	waitFor(t, 15*time.Second, "serving.yaml", func() bool {
		s, ok, _ := config.ReadServing(a.dir)
		a.http = "http://" + s.HTTP
		return ok
	})
	waitFor(t, 15*time.Second, "GET /readyz to answer 200", func() bool {
		resp, err := http.Get(a.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	_ = p
	return a
}

// account makes an account and returns its proxy config.
func (a *automator) account(t *testing.T, name string) string {
	t.Helper()
	profile := run(t, bin.automator, "account", "create", name, "--data-dir", a.dir)
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startProxy runs `proxy run` and waits until it polls.
func startProxy(t *testing.T, cfgPath, scripts, instance string) *proc {
	t.Helper()
	p := startProc(t, "proxy-"+instance, bin.proxy, "run", "--config", cfgPath, "--scripts-dir", scripts, "--instance-id", instance)
	waitFor(t, 15*time.Second, instance+" to poll", func() bool {
		return strings.Contains(p.Log(), "connected to the automator; polling")
	})
	return p
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
