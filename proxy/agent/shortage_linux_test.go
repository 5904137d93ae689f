package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// pollWatch is an automator's interceptor that, while watching, records
// the polls asking for units that come after one asking for none.
type pollWatch struct {
	mu       sync.Mutex
	watching bool
	sawNone  bool
	none     chan struct{} // told of the first poll for none while watching
	forUnits []int32       // polls for units after it, while watching
}

func (w *pollWatch) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if p, ok := req.(*automatorv1.PollRequest); ok {
		w.mu.Lock()
		switch {
		case !w.watching:
		case p.GetMaxUnits() == 0 && !w.sawNone:
			w.sawNone = true
			close(w.none)
		case p.GetMaxUnits() > 0 && w.sawNone:
			w.forUnits = append(w.forUnits, p.GetMaxUnits())
		}
		w.mu.Unlock()
	}
	return h(ctx, req)
}

func (w *pollWatch) watch(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watching = on
}

// shortProxy is a proxy process (the test binary run as agent.ShortProxy)
// of a real automator, whose log lines the test reads.
type shortProxy struct {
	pid   int
	lines chan string
	all   *lineTap
	stdin io.Closer // closing it stops the proxy (its grace period is 0)
}

// startShortProxy starts it, running up to 4 scripts at once, with the
// scripts hello.sh, hold.sh (which runs until the file its argument names
// exists), leave.sh and rest.sh (sleep, for 5 minutes), and waits for it
// to poll.
func startShortProxy(t *testing.T, a *automatortest.Automator, waitFor time.Duration) *shortProxy {
	t.Helper()
	return startShortProxyOf(t, a, waitFor, 4)
}

// startShortProxyOf is startShortProxy running up to maxConcurrency
// scripts at once.
func startShortProxyOf(t *testing.T, a *automatortest.Automator, waitFor time.Duration, maxConcurrency int) *shortProxy {
	t.Helper()
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "rest.sh", `exec sleep 300`)
	automatortest.WriteScript(t, scripts, "hello.sh", `echo "hello $PROXY_WORK_ID"`)
	automatortest.WriteScript(t, scripts, "hold.sh", `while [ ! -e "$1" ]; do sleep 0.05; done; echo held`)
	// leave.sh leaves a process running in a group of its own (timeout's),
	// which only the sweep of its session finds, writes its pid to $1, and
	// exits once $2 exists.
	automatortest.WriteScript(t, scripts, "leave.sh", `timeout 60 sleep 60 &
echo $! > "$1.tmp"; mv "$1.tmp" "$1"
while [ ! -e "$2" ]; do sleep 0.05; done; echo left`)
	spec, err := json.Marshal(agent.ShortProxy{Addr: a.GRPCAddr, Token: a.Token, Key: a.Key.String(), ScriptsDir: scripts,
		InstanceID: "short", MaxConcurrency: maxConcurrency, StartWaitFor: waitFor})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), agent.ShortProxyEnv+"="+string(spec))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &shortProxy{pid: cmd.Process.Pid, lines: make(chan string, 256), all: &lineTap{lines: make(chan string)}, stdin: stdin}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.all.Write([]byte(sc.Text() + "\n"))
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close() // it stops
		<-read
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the proxy's log:\n%s", p.all.String())
		}
	})
	p.waitLine(t, "the proxy to poll", "connected to the automator; polling")
	return p
}

// waitLine waits for a line holding part, and returns it; a line holding
// fail instead fails the test.
func (p *shortProxy) waitLine(t *testing.T, what, part string, fail ...string) string {
	t.Helper()
	for {
		line := waittest.Recv(t, p.lines, what)
		if strings.Contains(line, part) {
			return line
		}
		for _, f := range fail {
			if strings.Contains(line, f) {
				t.Fatalf("waiting for %s, the proxy logged:\n%s", what, line)
			}
		}
	}
}

// openFiles is the number of the process's open file descriptors.
func openFiles(t *testing.T, pid int) uint64 {
	t.Helper()
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return uint64(len(fds))
}

// limitOpenFiles sets the process's limit of open files (its soft one) to
// n, and returns a function that sets it back.
func limitOpenFiles(t *testing.T, pid int, n uint64) (restore func()) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: old.Max}, nil); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func submitHello(t *testing.T, caller automatorv1.AutomatorServiceClient, account string) string {
	t.Helper()
	st, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: account,
		Command: &automatorv1.Command{Script: "hello.sh"}, Timeout: durationpb.New(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	return st.GetWorkId()
}

func wantHello(t *testing.T, caller automatorv1.AutomatorServiceClient, id string) {
	t.Helper()
	got := waitEnded(t, caller, id)
	if got.GetState() != automatorv1.State_STATE_SUCCEEDED || string(got.GetResult().GetStdout()) != "hello "+id+"\n" {
		t.Errorf("unit %s ended %v (%s; failure %q), stdout %q; want succeeded, the script's output", id, got.GetState(), got.GetReason(),
			got.GetResult().GetFailure(), got.GetResult().GetStdout())
	}
}

// TestAUnitWhoseScriptLacksFileDescriptorsRunsOnceTheyAreFreeAndNoMoreAreClaimedMeanwhile:
// a proxy process at its limit of open files (a real limit, set with
// prlimit, so that making the script's pipes fails with EMFILE) does not
// fail the unit it claimed: nothing of the script ran, and it starts it
// again once descriptors are free. Meanwhile it polls for no units, so a
// unit queued then waits for it (or goes to another instance), and both
// succeed once the limit is raised. The unit failed at once, "too many
// open files", and the proxy went on claiming units to fail them so.
func TestAUnitWhoseScriptLacksFileDescriptorsRunsOnceTheyAreFreeAndNoMoreAreClaimedMeanwhile(t *testing.T) {
	t.Parallel()
	w := &pollWatch{none: make(chan struct{})}
	a := automatortest.Start(t, automatortest.Options{Plaintext: true, Interceptors: []grpc.UnaryServerInterceptor{w.intercept}})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	p := startShortProxy(t, a, time.Hour)
	restore := limitOpenFiles(t, p.pid, openFiles(t, p.pid)+1)
	first := submitHello(t, caller, a.Account)
	p.waitLine(t, "the proxy to wait for file descriptors to start the script", "scripts cannot start", "could not run the command")
	w.watch(true)
	waittest.Recv(t, w.none, "a poll for no units while the unit waits")
	second := submitHello(t, caller, a.Account)
	// Its claim would be on the next poll for units, which is not made.
	if st, err := caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: second}); err != nil || st.GetState() != automatorv1.State_STATE_QUEUED {
		t.Errorf("the unit queued while the first waits is %v (%v); want queued", st.GetState(), err)
	}
	w.watch(false)
	restore()
	wantHello(t, caller, first)
	wantHello(t, caller, second)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.forUnits) > 0 {
		t.Errorf("while its unit waited for file descriptors the proxy polled for units %v times", w.forUnits)
	}
	p.waitLine(t, "the proxy to say scripts start again", "scripts start again")
}

// TestAUnitWhoseScriptStillLacksFileDescriptorsFailsSayingSoBeforeItsDeadline:
// a proxy process that stays at its limit of open files fails the unit,
// after it waited for descriptors (1 s here), with the reason naming the
// limit, well before the unit's deadline; raised again, the next unit
// runs. The failure said only "making pipes: pipe2: too many open files".
func TestAUnitWhoseScriptStillLacksFileDescriptorsFailsSayingSoBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Plaintext: true})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	p := startShortProxy(t, a, time.Second)
	restore := limitOpenFiles(t, p.pid, openFiles(t, p.pid)+1)
	id := submitHello(t, caller, a.Account)
	got := waitEnded(t, caller, id)
	const why = `cannot start script "hello.sh": the proxy has as many files open as its limit allows (ulimit -n; LimitNOFILE= of its systemd unit): making pipes: pipe2: too many open files (waited `
	if got.GetState() != automatorv1.State_STATE_FAILED || !strings.HasPrefix(got.GetResult().GetFailure(), why) {
		t.Fatalf("the unit ended %v (%s), failure %q; want failed, saying %q…", got.GetState(), got.GetReason(), got.GetResult().GetFailure(), why)
	}
	restore()
	wantHello(t, caller, submitHello(t, caller, a.Account))
}

// TestAProxyWhoseScriptWaitedForResourcesClaimsAgainOnceItStarts: the unit
// waits for resources no more once its script has started, however long
// it runs: the proxy claims units again then, and says scripts start
// again. It claimed nothing, and said nothing, until the script had ended
// (found by a review).
func TestAProxyWhoseScriptWaitedForResourcesClaimsAgainOnceItStarts(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Plaintext: true})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	p := startShortProxy(t, a, time.Hour)
	restore := limitOpenFiles(t, p.pid, openFiles(t, p.pid)+1)
	release := filepath.Join(t.TempDir(), "release")
	held, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: a.Account,
		Command: &automatorv1.Command{Script: "hold.sh", Args: []string{release}}, Timeout: durationpb.New(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "the proxy to wait for file descriptors to start the script", "scripts cannot start", "could not run the command")
	restore()
	p.waitLine(t, "the proxy to say scripts start again, while hold.sh runs", "scripts start again")
	wantHello(t, caller, submitHello(t, caller, a.Account))
	if st, err := caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: held.GetWorkId()}); err != nil || st.GetState() != automatorv1.State_STATE_CLAIMED {
		t.Fatalf("hold.sh's unit after hello.sh's ended: %v (%v); want it still running", st.GetState(), err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := waitEnded(t, caller, held.GetWorkId()); got.GetState() != automatorv1.State_STATE_SUCCEEDED {
		t.Errorf("hold.sh's unit ended %v (%s); want succeeded", got.GetState(), got.GetReason())
	}
}

// leaveWithoutFiles submits leave.sh (released by the file release, timed
// out after timeout) to the proxy p, waits for what it leaves to run, and
// then leaves the proxy no file to open: its limit is set below what it
// has open, since the script's end closes a few (its pidfd, its pipes)
// before the sweep, which must find none free still. It returns the unit
// and the function that sets the limit back; what leave.sh left is killed
// when the test ends.
func leaveWithoutFiles(t *testing.T, caller automatorv1.AutomatorServiceClient, account string, p *shortProxy, release string, timeout time.Duration) (*automatorv1.WorkStatus, func()) {
	t.Helper()
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout command, which leave.sh runs")
	}
	pidFile := filepath.Join(t.TempDir(), "left.pid")
	st, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: account,
		Command: &automatorv1.Command{Script: "leave.sh", Args: []string{pidFile, release}}, Timeout: durationpb.New(timeout)})
	if err != nil {
		t.Fatal(err)
	}
	var left int
	waittest.Until(t, "leave.sh to start what it leaves", func() bool {
		b, err := os.ReadFile(pidFile)
		left, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	t.Cleanup(func() { _ = unix.Kill(-left, unix.SIGKILL) }) // timeout's group: it and its sleep
	return st, limitOpenFiles(t, p.pid, openFiles(t, p.pid)-8)
}

// TestAScriptWhoseLeftoversCannotBeKilledForWantOfFileDescriptorsIsLogged:
// after a script exits, the proxy kills what it left running in its
// session, which it finds in /proc. A proxy at its limit of open files
// cannot read /proc: its unit still succeeds (the script ran), and the
// proxy logs that what the script left may still run, and why. The sweep
// read an unreadable /proc as a host without processes, and said nothing.
func TestAScriptWhoseLeftoversCannotBeKilledForWantOfFileDescriptorsIsLogged(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Plaintext: true})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	p := startShortProxy(t, a, time.Hour)
	release := filepath.Join(t.TempDir(), "release")
	st, restore := leaveWithoutFiles(t, caller, a.Account, p, release, 2*time.Minute)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	line := p.waitLine(t, "the proxy to say it could not kill what leave.sh left", "what it left running may still run")
	for _, want := range []string{"work_id=" + st.GetWorkId(), "script=leave.sh", "listing processes", "too many open files"} {
		if !strings.Contains(line, want) {
			t.Errorf("the proxy logged %q; want it to say %q", line, want)
		}
	}
	restore()
	if got := waitEnded(t, caller, st.GetWorkId()); got.GetState() != automatorv1.State_STATE_SUCCEEDED || string(got.GetResult().GetStdout()) != "left\n" {
		t.Errorf("leave.sh's unit ended %v (%s), stdout %q; want succeeded, left", got.GetState(), got.GetReason(), got.GetResult().GetStdout())
	}
}

// TestAUnitWaitingToStartItsScriptWhenTheProxyStopsFailsSayingNothingRan:
// a proxy that stops while a unit waits for the file descriptors its
// script's start lacked fails the unit saying that its script was not
// started, and why. It said the script was killed.
func TestAUnitWaitingToStartItsScriptWhenTheProxyStopsFailsSayingNothingRan(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Plaintext: true})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	p := startShortProxy(t, a, time.Hour)
	limitOpenFiles(t, p.pid, openFiles(t, p.pid)+1)
	id := submitHello(t, caller, a.Account)
	p.waitLine(t, "the proxy to wait for file descriptors to start the script", "scripts cannot start", "could not run the command")
	p.stdin.Close()
	got := waitEnded(t, caller, id)
	failure := got.GetResult().GetFailure()
	if got.GetState() != automatorv1.State_STATE_FAILED || !strings.Contains(failure, "not started on instance short, nothing of it ran") ||
		!strings.Contains(failure, "too many open files") || strings.Contains(failure, "killed") {
		t.Errorf("the unit ended %v (%s), failure %q; want failed, saying its script was not started and why, not that it was killed", got.GetState(), got.GetReason(), failure)
	}
}

// TestAKillAtTheDeadlineThatCannotListProcessesIsLogged: at a unit's
// deadline the proxy kills the script's process tree, looking in /proc for
// what left its group; a proxy at its limit of open files cannot, and logs
// that some of the tree may still run, and why. It logged that the tree
// was killed. (Its own deadline, or the automator's timeout of the unit
// told first, on a loaded machine: a clean-clone run saw the second.)
func TestAKillAtTheDeadlineThatCannotListProcessesIsLogged(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Plaintext: true})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	p := startShortProxy(t, a, time.Hour)
	// leave.sh runs until its deadline: nothing makes its release file.
	st, restore := leaveWithoutFiles(t, caller, a.Account, p, filepath.Join(t.TempDir(), "never"), 5*time.Second)
	line := p.waitLine(t, "the proxy to say at the deadline that some of the tree may still run", "but some of it may still run")
	for _, want := range []string{"work_id=" + st.GetWorkId(), "too many open files"} {
		if !strings.Contains(line, want) {
			t.Errorf("the proxy logged %q; want it to say %q", line, want)
		}
	}
	// The proxy's own deadline, or the automator's, which a loaded
	// machine may tell it of first (the unit timed out there): the same
	// kill, either way.
	if !strings.Contains(line, "deadline reached") && !strings.Contains(line, "unit ended on the automator") {
		t.Errorf("the proxy logged %q; want it to say the deadline was reached, or that the automator ended the unit", line)
	}
	restore()
	if got := waitEnded(t, caller, st.GetWorkId()); got.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Errorf("leave.sh's unit ended %v (%s); want timed out", got.GetState(), got.GetReason())
	}
}

// pidsCgroupRoot is the cgroup v1 hierarchy of the pids controller, where
// a test may limit the processes (threads included) of one proxy process.
const pidsCgroupRoot = "/sys/fs/cgroup/pids"

// processLimit is a cgroup of the pids controller, to hold a proxy
// process.
type processLimit struct{ dir string }

// newProcessLimit makes one, removed when the test ends. Made before the
// proxy it will hold starts, it is removed after that proxy stopped. The
// test is skipped where no such cgroup can be made (not root, no cgroup v1
// pids hierarchy): a limit of processes set with prlimit binds no root
// process.
func newProcessLimit(t *testing.T) *processLimit {
	t.Helper()
	dir, err := os.MkdirTemp(pidsCgroupRoot, "opsgate-test-")
	if err != nil {
		t.Skipf("no cgroup to limit a proxy's processes in: %v", err)
	}
	t.Cleanup(func() {
		// What is left in it is killed: the scripts of a proxy that
		// aborted (it has no reaper here). Then it can be removed.
		waittest.Until(t, "the test's cgroup to be emptied and removed", func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, p := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(p); err == nil {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
			return os.Remove(dir) == nil
		})
	})
	return &processLimit{dir: dir}
}

// hold moves the process pid into the cgroup, whose tasks (threads of it
// and its children) may then number room more than it has now.
func (l *processLimit) hold(t *testing.T, pid, room int) {
	t.Helper()
	l.write(t, "cgroup.procs", strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(l.dir, "pids.current"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	l.write(t, "pids.max", strconv.Itoa(n+room))
}

func (l *processLimit) write(t *testing.T, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(l.dir, file), []byte(v), 0o644); err != nil {
		t.Fatalf("writing %s to the cgroup's %s: %v", v, file, err)
	}
}

// lift lifts the limit.
func (l *processLimit) lift(t *testing.T) {
	t.Helper()
	l.write(t, "pids.max", "max")
}

// processes is the number of processes in the cgroup (not threads).
func (l *processLimit) processes(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(b)))
}

// TestAProxyAtItsLimitOfProcessesRunsWhatFitsAndTheRestOnceThereIsRoom: a
// proxy process whose limit of processes (a cgroup's pids.max; also ulimit
// -u and systemd's TasksMax=, a thread counting as a process) leaves room
// for more scripts than the threads it reserved at its start, given 10
// units more than that of a script that sleeps, runs as many as there is
// room for, the proxy taking none of it, and the others once the limit is
// lifted. Each running script held a thread of the proxy, waiting for its
// exit, so half the room went to the proxy, and now and then the runtime
// could not make a thread it asked for and aborted the proxy ("failed to
// create new OS thread", "pthread_create failed").
func TestAProxyAtItsLimitOfProcessesRunsWhatFitsAndTheRestOnceThereIsRoom(t *testing.T) {
	t.Parallel()
	room := min(runtime.GOMAXPROCS(0), 8) + 24 // above runner.ReserveThreads's reserve
	units := room + 10
	limit := newProcessLimit(t)
	a := automatortest.Start(t, automatortest.Options{Plaintext: true})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	p := startShortProxyOf(t, a, time.Hour, units)
	wantHello(t, caller, submitHello(t, caller, a.Account)) // it serves, before the limit
	limit.hold(t, p.pid, room)
	var ids []string
	for range units {
		st, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: a.Account,
			Command: &automatorv1.Command{Script: "rest.sh"}, Timeout: durationpb.New(2 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.GetWorkId())
	}
	aborted := []string{"failed to create new OS thread", "pthread_create failed"}
	p.waitLine(t, "the proxy to find it can start no more scripts", "scripts cannot start", append(aborted, "could not run the command")...)
	if n := limit.processes(t) - 1; n != room { // the proxy's the one other
		t.Errorf("%d scripts ran in the room for %d; want all of it theirs, the proxy taking none for threads", n, room)
	}
	limit.lift(t)
	p.waitLine(t, "the proxy to start the other scripts", "scripts start again", append(aborted, "could not run the command")...)
	for _, id := range ids {
		if _, err := caller.Cancel(context.Background(), &automatorv1.CancelRequest{WorkId: id}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if got := waitEnded(t, caller, id); got.GetState() != automatorv1.State_STATE_CANCELLED {
			t.Errorf("unit %s ended %v (%s); want cancelled", id, got.GetState(), got.GetReason())
		}
	}
	wantHello(t, caller, submitHello(t, caller, a.Account))
}
