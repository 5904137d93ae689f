//go:build linux

package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/pidtest"
	"github.com/opsgate/opsgate/internal/proctest"
	"github.com/opsgate/opsgate/internal/testparallel"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
	psvc "github.com/opsgate/opsgate/proxy/service"
)

// bin holds the binaries TestMain found or built.
var bin struct{ dir, automator, proxy string }

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	// Up to six tests at once unless the command line says otherwise:
	// they wait on services and their processes far more than they
	// compute (88 s of wall for 25 s of CPU in `make test` with the
	// default of two; alone, 55 s with two and 42 s with six).
	testparallel.Default(6)
	// A directory of the binaries' own (prebuilt ones are linked into it),
	// which the Chmod below may open to others; as root, under /var/lib: a
	// service's binary may not lie in a temporary directory.
	parent := os.TempDir()
	if os.Geteuid() == 0 {
		parent = "/var/lib"
	}
	b, err := proctest.Binaries(parent, "opsgate-svctest-bin-", os.Getenv("E2E_RACE") != "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "service tests:", err)
		return 2
	}
	defer b.Remove()
	// Readable by a service's unprivileged user.
	if err := os.Chmod(b.Dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "service tests:", err)
		return 2
	}
	bin.dir, bin.automator, bin.proxy = b.Dir, b.Automator, b.Proxy
	// PostgreSQL for the compose topology's replicas.
	return proctest.NoLeaks("service tests", pgtest.Main(m))
}

// requireRoot skips a test that installs a service, saying why.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("installing an OS service needs root: run `sudo go test ./test/service/` (or as root) to run this test")
	}
}

// requireNobody returns the user nobody, which the tests of a service run
// as another user than root run it as, or skips the test.
func requireNobody(t *testing.T) *psvc.User {
	t.Helper()
	u, err := psvc.LookupUser("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	return u
}

// uniqueName is a service name no real installation uses.
func uniqueName(t *testing.T) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "opsgate-test-" + hex.EncodeToString(b)
}

// The shared harness under the names these tests use.
var (
	waitFor   = proctest.WaitFor
	freePort  = proctest.FreePort
	startProc = proctest.Start
	gone      = pidtest.Gone
)

type result = proctest.Result

func runCLI(path string, args ...string) result {
	return proctest.Run(3*time.Minute, path, args...)
}

// proxyCLI runs `proxy ARGS...` and fails the test unless it exits 0.
func proxyCLI(t *testing.T, args ...string) string {
	t.Helper()
	r := runCLI(bin.proxy, args...)
	if r.Code != 0 {
		t.Fatalf("proxy %s: %v", strings.Join(args, " "), r)
	}
	return r.Stdout
}

// ---- the automator ----

type automator struct {
	DataDir  string
	GRPCAddr string
	port     int
	proc     *proctest.Proc
}

func startAutomator(t *testing.T) *automator {
	t.Helper()
	a := &automator{DataDir: filepath.Join(t.TempDir(), "data")}
	var err error
	for range 3 { // a port taken between freePort and serve: try another
		a.port = freePort(t)
		if r := runCLI(bin.automator, "init", "--data-dir", a.DataDir, "--public-url", fmt.Sprintf("https://127.0.0.1:%d", a.port)); r.Code != 0 {
			t.Fatalf("automator init: %v", r)
		}
		if err = a.serve(t); err == nil {
			return a
		}
		if !errors.Is(err, proctest.ErrAddrInUse) {
			t.Fatal(err)
		}
		t.Logf("serve failed (%v); retrying on another port", err)
		a.DataDir = filepath.Join(t.TempDir(), "data")
	}
	t.Fatal(err)
	return nil
}

func (a *automator) serve(t *testing.T) error {
	t.Helper()
	// An earlier serve's, killed, would be read for this one's.
	_ = os.Remove(filepath.Join(a.DataDir, config.FileServing))
	a.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", a.port)
	p := startProc(t, "automator", bin.automator, "serve", "--data-dir", a.DataDir, "--listen", a.GRPCAddr, "--http-listen", "127.0.0.1:0")
	a.proc = p
	_, err := proctest.WaitServing(p, a.DataDir, 15*time.Second)
	return err
}

// profile returns the proxy profile of a new account.
func (a *automator) profile(t *testing.T, account string) string {
	t.Helper()
	return proctest.CreateAccount(t, bin.automator, a.DataDir, account)
}

// Exec runs `automator exec` to the end.
func (a *automator) Exec(args ...string) result {
	return runCLI(bin.automator, append([]string{"exec", "--data-dir", a.DataDir}, args...)...)
}

// Client is the caller API, as `automator exec --data-dir` dials it.
func (a *automator) Client(t *testing.T) automatorv1.AutomatorServiceClient {
	t.Helper()
	return proctest.Caller(t, a.DataDir, a.GRPCAddr)
}

// submit queues a unit and returns its id.
func submit(t *testing.T, c automatorv1.AutomatorServiceClient, account string, timeout time.Duration, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.Submit(ctx, &automatorv1.ExecuteRequest{
		Account: account,
		Command: &automatorv1.Command{Script: script, Args: args},
		Timeout: durationpb.New(timeout),
	})
	if err != nil {
		t.Fatalf("submitting %s: %v", script, err)
	}
	return st.GetWorkId()
}

func get(t *testing.T, c automatorv1.AutomatorServiceClient, id string) *automatorv1.WorkStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.Get(ctx, &automatorv1.GetRequest{WorkId: id})
	if err != nil {
		t.Fatalf("getting %s: %v", id, err)
	}
	return st
}

func wait(t *testing.T, c automatorv1.AutomatorServiceClient, id string, timeout time.Duration) *automatorv1.WorkStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := c.Wait(ctx, &automatorv1.WaitRequest{WorkId: id})
	if err != nil {
		t.Fatalf("waiting for %s: %v", id, err)
	}
	return st
}

// ---- scripts, configs and traces ----

// workDir holds the scripts and the run trace, readable (and the trace
// writable) by a service's unprivileged user, outside /tmp (a systemd
// service's /tmp is private).
type workDir struct {
	dir, scripts, trace string
}

func newWorkDir(t *testing.T) *workDir {
	t.Helper()
	parent := os.TempDir()
	if os.Geteuid() == 0 {
		parent = "/var/lib"
	}
	dir, err := os.MkdirTemp(parent, "opsgate-svctest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := &workDir{dir: dir, scripts: filepath.Join(dir, "scripts"), trace: filepath.Join(dir, "trace", "runs.log")}
	for _, d := range []string{dir, w.scripts, filepath.Dir(w.trace)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Dir(w.trace), 0o777); err != nil {
		t.Fatal(err)
	}
	// record.sh TRACE WORD: one line per run, an atomic O_APPEND write.
	w.script(t, "record.sh", `echo "$PROXY_WORK_ID $PROXY_INSTANCE_ID $(id -un) $2" >> "$1"
echo "ran $2 on $PROXY_INSTANCE_ID as $(id -un)"`)
	// slow.sh DIR: records its run, says it started, and finishes once
	// DIR/release exists, or once DIR is gone: a run whose proxy was killed
	// (the standby test) is nobody's to stop, and the test's cleanup may
	// remove DIR before the run has seen the release.
	w.script(t, "slow.sh", `echo "$PROXY_WORK_ID $PROXY_INSTANCE_ID $(id -un) slow" >> "$1/trace/runs.log"
: > "$1/trace/slow.started"
while [ ! -e "$1/trace/release" ] && [ -d "$1/trace" ]; do sleep 0.05; done
echo done`)
	return w
}

func (w *workDir) script(t *testing.T, name, body string) {
	t.Helper()
	proctest.WriteScript(t, w.scripts, name, body)
}

// config writes a proxy config: the profile plus local settings.
func (w *workDir) config(t *testing.T, profile, name string, settings ...string) string {
	t.Helper()
	path := filepath.Join(w.dir, name+".yaml")
	body := profile + "scripts_dir: " + w.scripts + "\n" + strings.Join(settings, "\n") + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runs returns the trace: per run, the fields "WORK_ID INSTANCE USER WORD".
func (w *workDir) runs() [][]string {
	data, err := os.ReadFile(w.trace)
	if err != nil {
		return nil
	}
	var runs [][]string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" {
			runs = append(runs, strings.Fields(l))
		}
	}
	return runs
}

// runsOf returns the runs of one unit.
func (w *workDir) runsOf(id string) [][]string {
	var out [][]string
	for _, r := range w.runs() {
		if r[0] == id {
			out = append(out, r)
		}
	}
	return out
}

// ---- installed services ----

// install runs `proxy install` and uninstalls the service when the test
// ends, whatever happened, killing what an uninstall could not stop.
func install(t *testing.T, name, cfgPath string, extra ...string) string {
	t.Helper()
	r := runCLI(bin.proxy, append([]string{"install", "--config", cfgPath, "--name", name}, extra...)...)
	t.Cleanup(func() {
		st, _ := agent.ReadState(filepath.Join(psvc.StateDir(name), agent.StateFileName))
		if t.Failed() {
			// Read before the cleanup removes it.
			log, _ := os.ReadFile(serviceLog(name))
			t.Logf("---- service log %s ----\n%s", serviceLog(name), log)
		}
		if r := runCLI(bin.proxy, "uninstall", "--name", name); r.Code != 0 && t.Failed() {
			t.Logf("cleanup: proxy uninstall --name %s: %v", name, r)
		}
		removeLog(name)
		if st.PID > 0 && !gone(st.PID) {
			_ = syscall.Kill(st.PID, syscall.SIGKILL)
		}
	})
	if r.Code != 0 {
		t.Fatalf("proxy install: %v", r)
	}
	return r.Stdout
}

func readState(name string) (agent.State, error) {
	return agent.ReadState(filepath.Join(psvc.StateDir(name), agent.StateFileName))
}

// waitPolled waits until the service's state file records a successful
// poll after since, by a process other than notPID, and returns the state.
// Failing, it logs what the state file held last, and the service's
// status.
func waitPolled(t *testing.T, name string, since time.Time, notPID int) agent.State {
	t.Helper()
	var st agent.State
	var err error
	polled := false
	t.Cleanup(func() {
		if t.Failed() && !polled {
			t.Logf("service %s's state file, read last: %+v, %v; its status:\n%s", name, st, err, runCLI(bin.proxy, "status", "--name", name))
		}
	})
	waitFor(t, 30*time.Second, "service "+name+" to poll the automator", func() bool {
		st, err = readState(name)
		return err == nil && st.LastPoll.After(since) && st.PID != notPID && st.StoppedAt.IsZero()
	})
	polled = true
	return st
}

// ---- files ----

// snapshot lists the paths under the directories a service install
// touches.
func snapshot(t *testing.T) map[string]bool {
	t.Helper()
	paths := map[string]bool{}
	for _, root := range []string{"/etc", "/var/lib", "/var/log", "/run"} {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if d != nil && d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			paths[p] = true
			return nil
		})
	}
	return paths
}

// inServiceDirs: p is where service definitions live. Nothing on the
// host writes there while a test runs but the tests of this repository,
// whose services are named opsgate-test-… (anotherTests).
func inServiceDirs(p string) bool {
	for _, prefix := range []string{"/etc/init.d/", "/etc/systemd/system/", "/etc/default/"} {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	matched, _ := filepath.Match("/etc/rc?.d/*", p)
	return matched
}

// serviceLog is the log a SysV service writes, which uninstall keeps.
func serviceLog(name string) string { return "/var/log/" + name + ".log" }

// removeLog removes the log uninstall kept of the test's service name
// (SysV), as the host keeps nothing of a test.
func removeLog(name string) { _ = os.Remove(serviceLog(name)) }

// assertLogKept checks, when the service manager is SysV init, that the
// uninstall of service name, which said out, kept the service's log with
// a last line saying so, and named it; then removes it.
func assertLogKept(t *testing.T, name, out string) {
	t.Helper()
	if psvc.Platform() != "unix-systemv" {
		return
	}
	defer removeLog(name)
	data, err := os.ReadFile(serviceLog(name))
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if err != nil || !strings.Contains(lines[len(lines)-1], "service "+name+" uninstalled; its log is kept") {
		t.Errorf("the service's log after uninstall: %v, last line %q; want it kept, saying so", err, lines[len(lines)-1])
	}
	if !strings.Contains(out, serviceLog(name)) {
		t.Errorf("uninstall does not name the log it kept, %s:\n%s", serviceLog(name), out)
	}
}

// assertNothingLeft fails the test if a path that was not there before
// install is there after uninstall: anything named after the service, and
// anything new among the service definitions.
func assertNothingLeft(t *testing.T, name string, before, after map[string]bool) {
	t.Helper()
	for p := range after {
		if before[p] || anotherTests(p, name) {
			continue
		}
		if strings.Contains(p, name) || inServiceDirs(p) {
			t.Errorf("left behind after uninstall: %s", p)
		}
	}
	for p := range before {
		if !after[p] && inServiceDirs(p) && !anotherTests(p, name) {
			t.Errorf("removed by install and uninstall, though it was there before: %s", p)
		}
	}
}

// anotherTests: p is a file of another test's service, not of service
// name. Every test here names the OS services it installs opsgate-test-…,
// and the tests of other packages (proxy/cli, proxy/service, automator/cli)
// install and remove theirs while this package's run (go test -p).
func anotherTests(p, name string) bool {
	base := filepath.Base(p)
	return strings.Contains(base, "opsgate-test-") && !strings.Contains(base, name)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}
