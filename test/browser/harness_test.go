//go:build linux

package browser

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/proctest"
)

// bin holds the binaries TestMain found or built; chromium is the browser's path.
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
	b, err := proctest.Binaries("", "opsgate-browser-bin-", false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser:", err)
		return 2
	}
	defer b.Remove()
	bin.automator, bin.proxy = b.Automator, b.Proxy
	return proctest.NoLeaks("browser", m.Run())
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

// The shared harness under the names these tests use.
var (
	waitFor   = proctest.WaitFor
	startProc = proctest.Start
)

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
	port := proctest.FreePort(t)
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
	// The port was free when FreePort looked; another process may bind it
	// before serve does. Only then move the public URL (no profile names it
	// yet) to another port and serve again.
	var s config.Serving
	for try := 1; ; try++ {
		p := startProc(t, "automator", bin.automator, "serve", "--data-dir", a.dir, "--listen", a.grpc, "--http-listen", "127.0.0.1:0")
		if s, err = proctest.WaitServing(p, a.dir, 15*time.Second); err == nil {
			break
		}
		if !errors.Is(err, proctest.ErrAddrInUse) || try == 3 {
			t.Fatal(err)
		}
		t.Logf("serve failed (%v); retrying on another port", err)
		a.grpc = fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
		cfg.PublicURL = "https://" + a.grpc
		if err := config.Save(a.dir, cfg); err != nil {
			t.Fatal(err)
		}
	}
	a.http = "http://" + s.HTTP
	waitFor(t, 15*time.Second, "GET /readyz to answer 200", func() bool {
		resp, err := http.Get(a.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return a
}

// account makes an account and returns its proxy config.
func (a *automator) account(t *testing.T, name string) string {
	t.Helper()
	profile := proctest.CreateAccount(t, bin.automator, a.dir, name)
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startProxy runs `proxy run` and waits until it polls.
func startProxy(t *testing.T, cfgPath, scripts, instance string) *proctest.Proc {
	t.Helper()
	p := proctest.StartProxy(t, bin.proxy, cfgPath, scripts, instance)
	proctest.WaitPolling(t, p, 15*time.Second)
	return p
}
