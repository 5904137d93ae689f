//go:build linux

package replicas

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/pidtest"
	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// bin holds the paths of the binaries TestMain found or built.
var bin struct{ automator, proxy string }

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	b, err := proctest.Binaries("", "opsgate-replicas-bin-", false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		return 2
	}
	defer b.Remove()
	bin.automator, bin.proxy = b.Automator, b.Proxy
	return proctest.NoLeaks("replicas", pgtest.Main(m))
}

// The shared harness under the names these tests use.
var (
	poll        = proctest.Poll
	freePort    = proctest.FreePort
	startProc   = proctest.Start
	writeScript = proctest.WriteScript
	lines       = proctest.Lines
	processGone = pidtest.Gone
)

// run runs a CLI to the end and returns its exit code, stdout and stderr.
func run(path string, args ...string) (code int, stdout, stderr string) {
	r := proctest.Run(2*time.Minute, path, args...)
	return r.Code, r.Stdout, r.Stderr
}

// ---- replicas ----

// replica is one `automator serve` process with a data directory of its own
// (a copy of the first: same master key, CA, certificate and API key) on the
// shared database.
type replica struct {
	ID       string
	DataDir  string
	GRPCAddr string
	proc     *proctest.Proc
}

// cluster is n replicas of one automator on one PostgreSQL schema.
type cluster struct {
	DSN      string
	Replicas []*replica
	caPEM    []byte
	apiKey   string
	started  bool // Start has run: profiles may name the replicas' ports
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
		proctest.CopyDataDir(t, first.DataDir, r.DataDir)
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
// A replica's port was free when freePort looked, but another process may
// bind it first: at the cluster's first start (no profile names a port
// yet), a replica whose address was in use is moved to another port, and
// started again.
func (c *cluster) Start(t testing.TB) {
	t.Helper()
	for _, r := range c.Replicas {
		r.start(t)
	}
	for _, r := range c.Replicas {
		for try := 1; ; try++ {
			err := r.waitServing()
			if err == nil {
				break
			}
			if c.started || !errors.Is(err, proctest.ErrAddrInUse) || try == 3 {
				t.Fatalf("replica %s: %v", r.ID, err)
			}
			t.Logf("replica %s: serve failed (%v); retrying on another port", r.ID, err)
			r.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
			if r == c.Replicas[0] {
				// The public URL is the first replica's, in every copy.
				for _, o := range c.Replicas {
					cfg, err := config.Load(o.DataDir)
					if err != nil {
						t.Fatal(err)
					}
					cfg.PublicURL = "https://" + r.GRPCAddr
					if err := config.Save(o.DataDir, cfg); err != nil {
						t.Fatal(err)
					}
				}
			}
			r.start(t)
		}
	}
	c.started = true
}

// start starts the replica's `automator serve`.
func (r *replica) start(t testing.TB) {
	t.Helper()
	// An earlier serve's, killed, would be read for this one's.
	_ = os.Remove(filepath.Join(r.DataDir, config.FileServing))
	r.proc = startProc(t, "automator-"+r.ID, bin.automator, "serve",
		"--data-dir", r.DataDir, "--listen", r.GRPCAddr, "--http-listen", "127.0.0.1:0",
		"--replica-id", r.ID)
}

// waitServing waits for serving.yaml and a 200 from /healthz.
func (r *replica) waitServing() error {
	_, err := proctest.WaitServing(r.proc, r.DataDir, 20*time.Second)
	return err
}

// createAccount makes an account and returns its proxy profile.
func (c *cluster) createAccount(t testing.TB, name string) string {
	t.Helper()
	return proctest.CreateAccount(t, bin.automator, c.Replicas[0].DataDir, name)
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
func startProxy(t testing.TB, cfgPath, scriptsDir, instanceID string) *proctest.Proc {
	t.Helper()
	p := proctest.StartProxy(t, bin.proxy, cfgPath, scriptsDir, instanceID)
	proctest.WaitPolling(t, p, 20*time.Second)
	return p
}

// ---- gRPC ----

// dial connects to replica r with a bearer secret (an API key or an
// account token); the connection is closed when the test ends.
func (c *cluster) dial(t testing.TB, r *replica, secret string) *grpc.ClientConn {
	t.Helper()
	return proctest.Dial(t, r.GRPCAddr, c.caPEM, secret, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
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
