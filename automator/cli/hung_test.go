//go:build linux

package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/closedport"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// noticeBound is how long a test gives a client command to say that its
// automator does not answer: the client's keepalive (10 s of silence and
// 10 s for the ping's answer) and a connection's setup, with a loaded
// machine's margin. Not a timing assertion: the point where "not yet"
// becomes "never".
const noticeBound = 90 * time.Second

// running is a client command run with Main in the background.
type running struct {
	mu             sync.Mutex
	stdout, stderr strings.Builder
	told           chan struct{} // closed at stderr's first line
	done           chan int      // the exit code
}

func start(ctx context.Context, args ...string) *running {
	r := &running{told: make(chan struct{}), done: make(chan int, 1)}
	var once sync.Once
	errw := writerFunc(func(b []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stderr.Write(b)
		if strings.Contains(r.stderr.String(), "\n") {
			once.Do(func() { close(r.told) })
		}
		return len(b), nil
	})
	outw := writerFunc(func(b []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.stdout.Write(b)
	})
	go func() { r.done <- Main(ctx, args, Env{Stdout: outw, Stderr: errw}) }()
	return r
}

// notice waits for the command's first line on stderr and returns it.
func (r *running) notice(t *testing.T, what string) string {
	t.Helper()
	select {
	case <-r.told:
	case code := <-r.done:
		t.Fatalf("%s ended (exit %d) before saying its automator does not answer: %s", what, code, r.errText())
	case <-time.After(noticeBound):
		t.Fatalf("%s said nothing on stderr for %v while its automator answered nothing", what, noticeBound)
	}
	line, _, _ := strings.Cut(r.errText(), "\n")
	return line
}

// endsOnCtrlC checks that the command what, which has said it keeps
// trying, still runs, and that Ctrl-C (interrupt) then ends it with exit
// 255 and nothing on stdout.
func (r *running) endsOnCtrlC(t *testing.T, what string, interrupt func()) {
	t.Helper()
	select {
	case code := <-r.done:
		t.Fatalf("%s ended (exit %d) once it had said it keeps trying: %s", what, code, r.errText())
	default:
	}
	interrupt()
	if code := waittest.Recv(t, r.done, what+" to end after Ctrl-C"); code != ExitError {
		t.Errorf("%s interrupted: exit %d; want %d: %s", what, code, ExitError, r.errText())
	}
	if out := r.outText(); out != "" {
		t.Errorf("stdout %q; want it empty", out)
	}
}

func (r *running) errText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

func (r *running) outText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stdout.String()
}

// stoppedServe writes in dir a serving.yaml naming a port whose automator
// is stopped (SIGSTOP): its kernel accepts connections into the listen
// backlog and nothing ever answers on them. Nothing accepts from the
// listener; closing it at the test's end resets them.
func stoppedServe(t *testing.T, dir string) string {
	t.Helper()
	return stoppedServeListener(t, dir).Addr().String()
}

// stoppedServeListener is stoppedServe's listener, for a test that
// accepts from it.
func stoppedServeListener(t *testing.T, dir string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := config.WriteServing(dir, config.Serving{GRPC: l.Addr().String(), HTTP: closedport.Addr(t)}); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestAClientCommandOfAStoppedAutomatorSaysSoWithinSeconds: exec, work
// wait and work cancel --data-dir, whose automator is stopped (its port
// accepts, nothing answers), say so in one line on stderr as soon as a
// connection's setup has given up (the TLS handshake's 5 s): the address,
// where it came from, that it is not answering and how long nothing came,
// what they do and until when they keep trying, and that Ctrl-C stops
// them; stdout stays empty, and Ctrl-C ends them with exit 255. Before,
// they said nothing until the retry budget's minute had passed.
func TestAClientCommandOfAStoppedAutomatorSaysSoWithinSeconds(t *testing.T) {
	t.Parallel()
	const id = "w_0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name  string
		args  []string
		doing string
	}{
		{name: "exec", args: []string{"exec", "--data-dir", "DIR", "--account", "acme", "x.sh"}, doing: `submitting work to account "acme"`},
		{name: "work wait", args: []string{"work", "wait", "--data-dir", "DIR", id}, doing: "waiting for work " + id},
		{name: "work cancel", args: []string{"work", "cancel", "--data-dir", "DIR", id}, doing: "getting work " + id},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := initDir(t)
			addr := stoppedServe(t, dir)
			ctx, interrupt := context.WithCancel(t.Context())
			defer interrupt()
			args := append([]string(nil), tc.args...)
			for i, a := range args {
				if a == "DIR" {
					args[i] = dir
				}
			}
			r := start(ctx, args...)
			line := r.notice(t, tc.name)
			for _, want := range []string{"the automator at https://" + addr + ", the address in " + filepath.Join(dir, config.FileServing), "automator serve --data-dir " + dir, "is not answering", tc.doing + ": trying again for", "Ctrl-C"} {
				if !strings.Contains(line, want) {
					t.Errorf("stderr's first line %q does not say %q", line, want)
				}
			}
			// The handshake's 5 s, or a first read's bound of as much.
			if !strings.Contains(line, "sent nothing for") && !strings.Contains(line, "did not begin within") {
				t.Errorf("stderr's first line %q does not say how long nothing came", line)
			}
			r.endsOnCtrlC(t, tc.name, interrupt)
		})
	}
}

// TestAClientCommandWhoseServeStoppedSinceDoesNotPointAtServingYaml: exec
// --data-dir took its address from serving.yaml, and the serve that wrote
// it stopped (and removed it) before exec said it could not reach it: the
// line says so, rather than pointing at a serving.yaml that is no longer
// there as one a killed serve left behind.
func TestAClientCommandWhoseServeStoppedSinceDoesNotPointAtServingYaml(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	l := stoppedServeListener(t, dir)
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	r := start(ctx, "exec", "--data-dir", dir, "--account", "acme", "x.sh")
	// exec dials once it has read serving.yaml; the connection gets no
	// answer, as from a serve stopping. Then serve's removal of the file.
	c := waittest.Recv(t, accepted, "exec to connect")
	defer c.Close()
	serving := filepath.Join(dir, config.FileServing)
	if err := os.Remove(serving); err != nil {
		t.Fatal(err)
	}
	line := r.notice(t, "exec")
	if want := "the address " + serving + " named as this command started, which serve has removed since"; !strings.Contains(line, want) {
		t.Errorf("stderr's first line %q does not say %q", line, want)
	}
	if strings.Contains(line, "leaves behind when killed") {
		t.Errorf("stderr's first line %q points at the serving.yaml serve removed as one it left behind", line)
	}
	r.endsOnCtrlC(t, "exec", interrupt)
}

// pausable is a TCP relay in front of an automator that a test can stop
// and continue, as SIGSTOP and SIGCONT do to its process: while stopped,
// connections are accepted (by the kernel) and stay open, nothing sent
// either way is read, and none is reset; once continued, what waited
// passes.
type pausable struct {
	lis    net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	stopped bool
	closed  bool
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startPausable(t *testing.T, target string) *pausable {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pausable{lis: lis, target: target}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *pausable) addr() string { return p.lis.Addr().String() }

func (p *pausable) accept() {
	defer p.wg.Done()
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *pausable) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		if !p.running() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.running() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// running waits while the relay is stopped; false once it is closed.
func (p *pausable) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.stopped && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

func (p *pausable) stop() { p.set(true) }
func (p *pausable) cont() { p.set(false) }

func (p *pausable) set(stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = stopped
	p.cond.Broadcast()
}

func (p *pausable) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	conns := p.conns
	p.mu.Unlock()
	p.lis.Close()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// TestExecWhoseAutomatorStopsWhileItWaitsSaysSoOnce: exec waiting for its
// unit on an automator whose process then stops (SIGSTOP: its connection
// stays open, nothing comes over it) says so in one line on stderr once
// its keepalive has given the connection up (20 s of silence at most): the
// address, that it is not answering, that it still waits for the unit and
// until when, and that Ctrl-C stops it. When the automator continues in
// time, exec gets the unit's result and exits with its code, its stdout
// clean and nothing more said; when Ctrl-C comes first, it tries to cancel
// the unit (saying, a second on, that it does and what a second Ctrl-C
// does, not again that the automator is not answering), and exits 255
// with one line naming the unit, which may still run. Before, exec said
// nothing until a minute past the unit's deadline (up to 6 minutes).
func TestExecWhoseAutomatorStopsWhileItWaitsSaysSoOnce(t *testing.T) {
	t.Parallel()
	for _, resumes := range []bool{true, false} {
		name := "interrupted"
		if resumes {
			name = "continued"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := serveInProcess(t)
			profile := s.account(t, "acme")
			automatortest.WriteScript(t, s.scripts, "x.sh", `echo "ran $1"; exit 3`)
			relay := startPausable(t, s.grpc)
			ctx, interrupt := context.WithCancel(t.Context())
			defer interrupt()
			// No proxy yet: the unit waits, queued, and so does exec.
			r := start(ctx, "exec", "--server", "https://"+relay.addr(), "--api-key-file", filepath.Join(s.dir, config.FileAPIKey), "--ca", filepath.Join(s.dir, config.FileCACert),
				"--account", "acme", "--timeout", "10m", "x.sh", "here")
			var id string
			automatortest.WaitFor(t, 20*time.Second, "exec's unit to be queued", func() bool {
				_, out, _ := runMain(t, "work", "list", "--data-dir", s.dir, "--account", "acme")
				id = regexp.MustCompile(`w_[0-9a-f]{32}`).FindString(out)
				return id != ""
			})
			// Queued is not yet waited for: the submit's answer may still
			// be on its way, and stopped with it, exec would say it is
			// still submitting.
			automatortest.WaitFor(t, 20*time.Second, "exec to wait for its unit", func() bool {
				waits, _ := metricValue(scrape(t, s.http), "automator_waits_open", "account", "acme")
				return waits == 1
			})
			relay.stop()
			line := r.notice(t, "exec")
			for _, want := range []string{"the automator at https://" + relay.addr() + " is not answering", "nothing came over its connection for", "waiting for work " + id + ": trying again for", "Ctrl-C"} {
				if !strings.Contains(line, want) {
					t.Errorf("stderr's first line %q does not say %q", line, want)
				}
			}
			if resumes {
				relay.cont()
				s.proxy(t, profile, "a")
				code := waittest.Recv(t, r.done, "exec to end with its unit's result once its automator continued")
				if code != 3 || r.outText() != "ran here\n" || r.errText() != line+"\n" {
					t.Errorf("exec: exit %d, stdout %q, stderr %q; want the unit's exit 3 and stdout, and only the notice on stderr", code, r.outText(), r.errText())
				}
				return
			}
			interrupt()
			code := waittest.Recv(t, r.done, "exec to end after Ctrl-C")
			lines := strings.Split(strings.TrimSuffix(r.errText(), "\n"), "\n")
			if code != ExitError || r.outText() != "" || len(lines) != 3 || !strings.HasPrefix(lines[1], "automator: interrupted: cancelling work "+id+", which is taking a while") ||
				!strings.Contains(lines[2], "work "+id+" was queued and may still run") || !strings.Contains(lines[2], "no automator answered its cancel within") {
				t.Errorf("exec interrupted: exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout, and after the notice one line saying it cancels work %s, then one that no automator answered the cancel, naming the unit, which may still run", code, r.outText(), r.errText(), ExitError, id)
			}
		})
	}
}

// TestWorkWaitOnAStuckAutomatorSaysItsCallIsStuck: work wait on an
// automator whose wait handler is stuck (on its database, say) while its
// connection answers the client's keepalive pings says so once the unit's
// deadline has passed: the automator answers, not the call; it does not
// say the automator's process is stopped or its packets dropped, which
// the answered pings rule out. Before, it did.
func TestWorkWaitOnAStuckAutomatorSaysItsCallIsStuck(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if info.FullMethod == automatorv1.AutomatorService_Wait_FullMethodName {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return h(ctx, req)
		},
	}})
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Long enough for a keepalive ping, which the automator answers,
	// before the deadline.
	w, err := c.Submit(t.Context(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(stuckUnitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	r := start(ctx, "work", "wait", w.ID, "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile)
	line := r.notice(t, "work wait")
	for _, want := range []string{"the automator at " + a.URL() + " is not answering", "it has not told how the unit ended", "; its connection answered meanwhile", "the call is stuck in it", "waiting for work " + w.ID + ": trying again for"} {
		if !strings.Contains(line, want) {
			t.Errorf("stderr's first line %q does not say %q", line, want)
		}
	}
	if strings.Contains(line, "stopped or frozen") || strings.Contains(line, "packets dropped") {
		t.Errorf("stderr's first line %q says the automator stopped or its packets dropped; its connection answered", line)
	}
	// The unit timed out meanwhile (no proxy), which the read that
	// resumes the wait learns.
	if code := waittest.Recv(t, r.done, "work wait to end"); code != ExitNotAllSucceeded {
		t.Errorf("work wait: exit %d; want %d (the unit timed out): %s", code, ExitNotAllSucceeded, r.errText())
	}
}

// stuckUnitTimeout is the unit's timeout in tests of a call stuck in an
// automator that answers pings: the client pings after 10 s without a
// word.
const stuckUnitTimeout = 15 * time.Second
