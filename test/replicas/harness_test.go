//go:build linux

package replicas

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// bin holds the paths of the binaries TestMain built.
var bin struct{ automator, proxy string }

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "opsgate-replicas-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicas: making the binaries' directory:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	args := []string{"build", "-o", dir + string(filepath.Separator),
		"github.com/opsgate/opsgate/automator/cmd/automator",
		"github.com/opsgate/opsgate/proxy/cmd/proxy"}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "replicas: go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 2
	}
	bin.automator = filepath.Join(dir, "automator")
	bin.proxy = filepath.Join(dir, "proxy")

	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "replicas: leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// poll reports whether cond became true within timeout, looking every
// 20ms. Only for what a child process shows through files and ports.
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

// ---- child processes ----

// proc is a long-running child. It leads its own process group; its output
// goes to a log file, whose tail is printed when the test fails.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

func startProc(t testing.TB, name, path string, args ...string) *proc {
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
			t.Logf("---- tail of %s ----\n%s", name, tail(logPath, 30))
		}
	})
	return p
}

func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill crashes the process (SIGKILL) and waits for it to be gone.
func (p *proc) Kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die within 10s of SIGKILL", p.name)
	}
}

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
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// run runs a CLI to the end and returns its exit code, stdout and stderr.
func run(path string, args ...string) (code int, stdout, stderr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	} else if err != nil {
		e.WriteString(err.Error())
	}
	return code, o.String(), e.String()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// copyDir copies the regular files of a data directory.
func copyDir(t testing.TB, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == config.FileServing {
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenFile(filepath.Join(to, e.Name()), os.O_CREATE|os.O_WRONLY|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(dst, src)
		src.Close()
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// ---- replicas ----

// replica is one `automator serve` process with a data directory of its own
// (a copy of the first: same master key, CA, certificate and API key) on the
// shared database.
type replica struct {
	ID       string
	DataDir  string
	GRPCAddr string
	proc     *proc
}

// cluster is n replicas of one automator on one PostgreSQL schema.
type cluster struct {
	DSN      string
	Replicas []*replica
	caPEM    []byte
	apiKey   string
}

// newCluster initialises one data directory on dsn and copies it for n
// replicas, each with its own gRPC port (not started yet). The public URL,
// which profiles carry, is the first replica's.
func newCluster(t testing.TB, dsn string, n int) *cluster {
	t.Helper()
	c := &cluster{DSN: dsn}
	root := t.TempDir()
	for i := range n {
		c.Replicas = append(c.Replicas, &replica{
			ID:       fmt.Sprintf("r%d", i),
			DataDir:  filepath.Join(root, fmt.Sprintf("data-%d", i)),
			GRPCAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		})
	}
	first := c.Replicas[0]
	if code, out, errOut := run(bin.automator, "init", "--data-dir", first.DataDir,
		"--public-url", "https://"+first.GRPCAddr, "--db", dsn); code != 0 {
		t.Fatalf("automator init: exit %d\n%s%s", code, out, errOut)
	}
	for _, r := range c.Replicas[1:] {
		copyDir(t, first.DataDir, r.DataDir)
	}
	var err error
	if c.caPEM, err = os.ReadFile(filepath.Join(first.DataDir, config.FileCACert)); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(first.DataDir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	c.apiKey = strings.TrimSpace(string(key))
	return c
}

// Start starts every replica at the same moment and waits until each serves.
func (c *cluster) Start(t testing.TB) {
	t.Helper()
	for _, r := range c.Replicas {
		r.proc = startProc(t, "automator-"+r.ID, bin.automator, "serve",
			"--data-dir", r.DataDir, "--listen", r.GRPCAddr, "--http-listen", "127.0.0.1:0",
			"--replica-id", r.ID)
	}
	for _, r := range c.Replicas {
		if err := r.waitServing(); err != nil {
			t.Fatalf("replica %s: %v", r.ID, err)
		}
	}
}

// waitServing waits for serving.yaml and a 200 from /healthz.
func (r *replica) waitServing() error {
	var s config.Serving
	ok := poll(20*time.Second, func() bool {
		if r.proc.Exited() {
			return true
		}
		var found bool
		s, found, _ = config.ReadServing(r.DataDir)
		return found
	})
	switch {
	case r.proc.Exited():
		return fmt.Errorf("automator serve exited: %s", tail(r.proc.logPath, 5))
	case !ok:
		return errors.New("automator serve wrote no serving.yaml within 20s")
	}
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	if !poll(20*time.Second, func() bool {
		resp, err := client.Get("http://" + s.HTTP + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		return fmt.Errorf("GET http://%s/healthz did not answer 200 within 20s", s.HTTP)
	}
	return nil
}

// createAccount makes an account and returns its proxy profile.
func (c *cluster) createAccount(t testing.TB, name string) string {
	t.Helper()
	code, out, errOut := run(bin.automator, "account", "create", name, "--data-dir", c.Replicas[0].DataDir)
	if code != 0 {
		t.Fatalf("automator account create %s: exit %d: %s", name, code, errOut)
	}
	return out
}

// proxyConfig writes a proxy config from a profile, pointed at replica r
// (as a load balancer would send it there), with extra local settings.
func proxyConfig(t testing.TB, profile string, r *replica, settings ...string) string {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.Split(profile, "\n") {
		if strings.HasPrefix(line, "automator_url: ") {
			line = "automator_url: https://" + r.GRPCAddr
		}
		b.WriteString(line + "\n")
	}
	b.WriteString(strings.Join(settings, "\n") + "\n")
	path := filepath.Join(t.TempDir(), "proxy-"+r.ID+".yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// profileValue returns the value of a top-level "key: value" line.
func profileValue(t testing.TB, profile, key string) string {
	t.Helper()
	for _, line := range strings.Split(profile, "\n") {
		if v, ok := strings.CutPrefix(line, key+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("the profile has no %q line", key)
	return ""
}

// startProxy runs `proxy run` for one instance and waits until it polls.
func startProxy(t testing.TB, cfgPath, scriptsDir, instanceID string) *proc {
	t.Helper()
	p := startProc(t, "proxy-"+instanceID, bin.proxy, "run",
		"--config", cfgPath, "--scripts-dir", scriptsDir, "--instance-id", instanceID)
	if !poll(20*time.Second, func() bool {
		return strings.Contains(p.Log(), "connected to the automator; polling") || p.Exited()
	}) || p.Exited() {
		t.Fatalf("proxy %s did not start polling: %s", instanceID, tail(p.logPath, 10))
	}
	return p
}

// ---- gRPC ----

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// dial connects to replica r with a bearer secret (an API key or an
// account token); the connection is closed when the test ends.
func (c *cluster) dial(t testing.TB, r *replica, secret string) *grpc.ClientConn {
	t.Helper()
	tlsCfg, err := pki.ClientTLS(c.caPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+r.GRPCAddr,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(bearer(secret)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// callers returns an AutomatorService client per replica, as the admin.
func (c *cluster) callers(t testing.TB) []automatorv1.AutomatorServiceClient {
	t.Helper()
	var out []automatorv1.AutomatorServiceClient
	for _, r := range c.Replicas {
		out = append(out, automatorv1.NewAutomatorServiceClient(c.dial(t, r, c.apiKey)))
	}
	return out
}

// writeScript writes an executable /bin/sh script.
func writeScript(t testing.TB, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// lines returns the non-empty lines of a file.
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
