//go:build linux

package chaos

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/proctest"
)

// ---- the automator ----

// automator is one data directory served by `automator serve` on a fixed
// loopback port, restartable after a crash.
type automator struct {
	t         *testing.T
	dir       string // test directory: logs
	DataDir   string
	Host      string // the public URL's host (names the certificate)
	Port      int
	Plaintext bool // cleartext gRPC (h2c), so relays can see the calls
	// ReplicaID names a replica of several on one PostgreSQL database
	// (--replica-id); empty for the one automator on SQLite.
	ReplicaID string
	// DB, when set, is the database URL it serves with (--db), instead of
	// the one init wrote (a replica reaches PostgreSQL through a relay).
	DB string
	// HTTPPort, when set, fixes the HTTP listener's port (a load
	// balancer's health check asks it), else a free one each start.
	HTTPPort int

	// onAddrInUse, when set, is called when a start failed because an
	// address was taken, before Serve waits to try again.
	onAddrInUse func(error)
	// Env replaces variables of serve's environment (an empty value
	// removes one).
	Env map[string]string

	mu       sync.Mutex
	proc     *proc
	serves   int
	attempts int // starts of `automator serve`, across Serve calls
}

// newAutomator initialises a data directory; Serve starts it.
func newAutomator(t *testing.T, dir, host string, plaintext bool) *automator {
	t.Helper()
	binaries(t)
	a := &automator{t: t, dir: dir, DataDir: filepath.Join(dir, "data"), Host: host, Port: proctest.FreePort(t), Plaintext: plaintext}
	if out, err := exec.Command(bins.Automator, "init", "--data-dir", a.DataDir, "--public-url", fmt.Sprintf("https://%s:%d", host, a.Port)).CombinedOutput(); err != nil {
		t.Fatalf("automator init: %v\n%s", err, out)
	}
	return a
}

// Addr is where the automator listens.
func (a *automator) Addr() string { return fmt.Sprintf("127.0.0.1:%d", a.Port) }

// Serve starts `automator serve` and returns once it serves (it says so,
// and /healthz answers).
func (a *automator) Serve() error {
	a.mu.Lock()
	a.serves++
	n := a.serves
	a.mu.Unlock()
	httpListen := "127.0.0.1:0"
	if a.HTTPPort != 0 {
		httpListen = fmt.Sprintf("127.0.0.1:%d", a.HTTPPort)
	}
	args := []string{"serve", "--data-dir", a.DataDir, "--listen", a.Addr(), "--http-listen", httpListen}
	if a.DB != "" {
		args = append(args, "--db", a.DB)
	}
	if a.Plaintext {
		args = append(args, "--insecure-plaintext")
	}
	if a.ReplicaID != "" {
		args = append(args, "--replica-id", a.ReplicaID)
	}
	// The port is the automator's for the whole test (profiles name it,
	// proxies reconnect to it), so a start is tried again only when an
	// address it listens on was taken, and once the port can be bound;
	// any other failure is the test's to report.
	for attempt := 1; ; attempt++ {
		err := a.serveOnce(n, args)
		if err == nil || !errors.Is(err, proctest.ErrAddrInUse) || attempt == 5 {
			return err
		}
		if a.onAddrInUse != nil {
			a.onAddrInUse(err)
		}
		if !proctest.Poll(5*time.Second, func() bool { return canListen(a.Addr()) && (a.HTTPPort == 0 || canListen(httpListen)) }) {
			return fmt.Errorf("%w; still taken 5s later", err)
		}
	}
}

// canListen reports whether addr can be listened on now.
func canListen(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func (a *automator) serveOnce(n int, args []string) error {
	a.mu.Lock()
	a.attempts++
	a.mu.Unlock()
	_ = os.Remove(filepath.Join(a.DataDir, config.FileServing))
	name, logName := fmt.Sprintf("automator-%d", n), "automator.log"
	if a.ReplicaID != "" {
		name, logName = fmt.Sprintf("automator-%s-%d", a.ReplicaID, n), "automator-"+a.ReplicaID+".log"
	}
	p, err := startProc(a.t, name, filepath.Join(a.dir, logName), a.Env, bins.Automator, args...)
	if err != nil {
		return err
	}
	if err := await(p, p.Seen("msg=serving"), 30*time.Second); err != nil {
		p.Kill()
		if proctest.AddrInUse(p.Log()) {
			err = fmt.Errorf("%w: %w", proctest.ErrAddrInUse, err)
		}
		return err
	}
	s, ok, err := config.ReadServing(a.DataDir)
	if err != nil || !ok {
		p.Kill()
		return fmt.Errorf("automator serves but serving.yaml is not readable: %v", err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + s.HTTP + "/healthz")
	if err != nil {
		p.Kill()
		return err
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		p.Kill()
		return fmt.Errorf("/healthz answered %s", resp.Status)
	}
	a.mu.Lock()
	a.proc = p
	a.mu.Unlock()
	return nil
}

// Kill crashes the automator with SIGKILL.
func (a *automator) Kill() {
	a.mu.Lock()
	p := a.proc
	a.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// ReadyURL is the replica's /readyz, which a load balancer's health check
// asks (HTTPPort must be set).
func (a *automator) ReadyURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/readyz", a.HTTPPort)
}

// Proc is the current serve process.
func (a *automator) Proc() *proc {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proc
}

// CreateAccount makes an account and returns its proxy profile.
func (a *automator) CreateAccount(name string) string {
	a.t.Helper()
	out, err := exec.Command(bins.Automator, "account", "create", name, "--data-dir", a.DataDir).Output()
	if err != nil {
		a.t.Fatalf("automator account create %s: %v", name, err)
	}
	return string(out)
}

// Dial connects a caller with the admin API key. The connection survives
// restarts (it reconnects); it is closed when the test ends.
func (a *automator) Dial() *grpc.ClientConn {
	a.t.Helper()
	return a.DialAt(a.Addr())
}

// DialAt is Dial through addr, a relay in front of the automator: over TLS
// the certificate is checked for 127.0.0.1, which names the automator
// whatever port it is reached on.
func (a *automator) DialAt(addr string) *grpc.ClientConn {
	a.t.Helper()
	key, err := os.ReadFile(filepath.Join(a.DataDir, config.FileAPIKey))
	if err != nil {
		a.t.Fatal(err)
	}
	creds := insecure.NewCredentials()
	if !a.Plaintext {
		caPEM, err := os.ReadFile(filepath.Join(a.DataDir, config.FileCACert))
		if err != nil {
			a.t.Fatal(err)
		}
		tlsCfg, err := pki.ClientTLS(caPEM, "127.0.0.1")
		if err != nil {
			a.t.Fatal(err)
		}
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(strings.TrimSpace(string(key)), !a.Plaintext)),
	)
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { conn.Close() })
	return conn
}

// ---- proxy instances ----

// instance is one configured proxy instance: its own config file (the
// account's profile, its automator_url pointing where the harness says),
// state directory (status file and spool) and log. It may be running or
// stopped (a warm standby), and is restarted after a crash.
type instance struct {
	t        *testing.T
	ID       string
	cfgPath  string
	StateDir string
	logPath  string
	env      map[string]string

	mu   sync.Mutex
	proc *proc
}

// newInstance writes the instance's config: profile with automator_url
// replaced by url, plus local settings.
func newInstance(t *testing.T, dir, id, profile, url, scripts string, maxConcurrency int, env map[string]string) *instance {
	t.Helper()
	in := &instance{t: t, ID: id, cfgPath: filepath.Join(dir, id+".yaml"), StateDir: filepath.Join(dir, id+"-state"), logPath: filepath.Join(dir, id+".log"), env: env}
	var lines []string
	for _, l := range strings.Split(profile, "\n") {
		if strings.HasPrefix(l, "automator_url:") {
			l = "automator_url: " + url
		}
		lines = append(lines, l)
	}
	lines = append(lines,
		"scripts_dir: "+scripts,
		"instance_id: "+id,
		fmt.Sprintf("max_concurrency: %d", maxConcurrency),
		"state_dir: "+in.StateDir,
		"grace_period: 2s",
		"allowed_env: [CHAOS_LOG]",
	)
	if err := os.WriteFile(in.cfgPath, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return in
}

// Start runs `proxy run` (the service's command line) and returns at once;
// polling is closed when it says it is connected and polling.
func (in *instance) Start() (polling <-chan struct{}, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc != nil && !in.proc.Exited() {
		return nil, fmt.Errorf("%s is already running", in.ID)
	}
	p, err := startProc(in.t, "proxy-"+in.ID, in.logPath, in.env, bins.Proxy, "run", "--config", in.cfgPath)
	if err != nil {
		return nil, err
	}
	in.proc = p
	return p.Seen("connected to the automator; polling"), nil
}

// StartPolling starts the instance and waits until it polls.
func (in *instance) StartPolling(timeout time.Duration) error {
	polling, err := in.Start()
	if err != nil {
		return err
	}
	return await(in.Proc(), polling, timeout)
}

// Proc is the current (or last) process; nil if never started.
func (in *instance) Proc() *proc {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.proc
}

// Running reports whether a process of the instance runs.
func (in *instance) Running() bool {
	p := in.Proc()
	return p != nil && !p.Exited()
}

// Kill crashes the instance with SIGKILL (its scripts, which lead their own
// process groups, live on, as after a real crash).
func (in *instance) Kill() {
	if p := in.Proc(); p != nil {
		p.Kill()
	}
}

// Signal sends sig to the running process.
func (in *instance) Signal(sig syscall.Signal) error {
	p := in.Proc()
	if p == nil {
		return fmt.Errorf("%s is not running", in.ID)
	}
	return p.Signal(sig)
}

// ---- scripts ----

// echoScript is the chaos runs' script. Each run appends one line when it
// starts and one when it ends to $CHAOS_LOG (one write each, O_APPEND), and
// prints "$1:STDIN"; it sleeps $2 seconds first and exits with $3. bash's
// $EPOCHREALTIME and builtins keep it to one process (two with a sleep).
const echoScript = `#!/bin/bash
s=$EPOCHREALTIME
printf 'S %s %s %s\n' "$PROXY_WORK_ID" "$PROXY_INSTANCE_ID" "$s" >> "$CHAOS_LOG"
IFS= read -r -d '' in
if [ "$2" != "0" ]; then sleep "$2"; fi
printf '%s:%s\n' "$1" "$in"
printf 'E %s %s %s %s\n' "$PROXY_WORK_ID" "$PROXY_INSTANCE_ID" "$s" "$EPOCHREALTIME" >> "$CHAOS_LOG"
exit "$3"
`

// writeScripts makes a scripts directory holding echo.sh.
func writeScripts(t *testing.T, dir string) string {
	t.Helper()
	scripts := filepath.Join(dir, "scripts")
	if err := os.MkdirAll(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	proctest.WriteExecutable(t, filepath.Join(scripts, "echo.sh"), []byte(echoScript))
	return scripts
}

// readExecs parses an execution log (none if it does not exist yet).
func readExecs(t *testing.T, path string) []Exec {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, err := ParseExecLog(f)
	if err != nil {
		t.Fatal(err)
	}
	return es
}
