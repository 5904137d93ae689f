//go:build linux

package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one run of a long-lived child (automator serve, proxy run). It
// leads its own process group. Its stdout and stderr go through a pipe the
// harness reads line by line: each line is appended to the log file (one
// per name, across restarts) and matched against the watches, so the
// harness waits for what a process says, not for time.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its output is read
	exit int           // valid once done is closed; -1 if a signal ended it

	mu      sync.Mutex
	lines   []string // kept for Count and the tail on failure
	watches []*watch
}

type watch struct {
	substrs []string
	c       chan struct{}
}

// holdsAll reports whether line holds every one of substrs.
func holdsAll(line string, substrs []string) bool {
	for _, s := range substrs {
		if !strings.Contains(line, s) {
			return false
		}
	}
	return true
}

// startProc starts path with args; extraEnv replaces variables of the
// test's environment (an empty value removes one).
func startProc(t *testing.T, name, logPath string, extraEnv map[string]string, path string, args ...string) (*proc, error) {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = environ(extraEnv)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	fmt.Fprintf(logf, "==== %s: started %s (pid %d)\n", time.Now().Format("15:04:05.000"), name, cmd.Process.Pid)
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			p.line(line)
		}
	}()
	go func() {
		_ = cmd.Wait()
		<-read
		p.exit = cmd.ProcessState.ExitCode()
		fmt.Fprintf(logf, "==== %s: %s exited (%v)\n", time.Now().Format("15:04:05.000"), name, cmd.ProcessState)
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		// The group too, and a stopped process must be able to die.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		<-p.done
		if p.Count("WARNING: DATA RACE") > 0 {
			t.Errorf("%s reported a data race (CHAOS_RACE=1 build); see %s", name, logPath)
		}
	})
	return p, nil
}

// environ is the test's environment with extra's variables replaced.
// Proxy settings of the environment never leak into children unless given.
func environ(extra map[string]string) []string {
	drop := map[string]bool{"HTTPS_PROXY": true, "https_proxy": true, "HTTP_PROXY": true, "http_proxy": true, "NO_PROXY": true, "no_proxy": true, "ALL_PROXY": true, "all_proxy": true}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; ok || drop[k] {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range extra {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func (p *proc) line(l string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, l)
	kept := p.watches[:0]
	for _, w := range p.watches {
		if holdsAll(l, w.substrs) {
			close(w.c)
		} else {
			kept = append(kept, w)
		}
	}
	p.watches = kept
}

// Watch returns a channel closed when the process writes a line holding
// substr (and each of more) from now on.
func (p *proc) Watch(substr string, more ...string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := &watch{substrs: append([]string{substr}, more...), c: make(chan struct{})}
	p.watches = append(p.watches, w)
	return w.c
}

// Seen returns a channel closed once the process has written a line
// holding substr (and each of more), already or from now on: for what a
// process just started may say before the caller gets to watch for it.
// The whole line is matched, wherever it is in the log: a child's log
// may hold many lines of gRPC's own (GRPC_GO_LOG_SEVERITY_LEVEL=info)
// after it.
func (p *proc) Seen(substr string, more ...string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	substrs := append([]string{substr}, more...)
	c := make(chan struct{})
	for _, l := range p.lines {
		if holdsAll(l, substrs) {
			close(c)
			return c
		}
	}
	p.watches = append(p.watches, &watch{substrs: substrs, c: c})
	return c
}

// Log returns the lines written so far.
func (p *proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// Count counts the lines written so far that hold substr.
func (p *proc) Count(substr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// Tail returns the last n lines.
func (p *proc) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n")
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

// Signal sends sig to the process itself (not its group: a proxy's scripts
// lead groups of their own anyway).
func (p *proc) Signal(sig syscall.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Kill sends SIGKILL, what a crash looks like, and waits for the end.
func (p *proc) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies too
	<-p.done
}

// PID is the process id.
func (p *proc) PID() int { return p.cmd.Process.Pid }

// await waits for c, the process's end or timeout, whichever comes first,
// and says which.
func await(p *proc, c <-chan struct{}, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited with %d: %s", p.name, p.exit, p.Tail(5))
	case <-t.C:
		return fmt.Errorf("%s: nothing within %v; last lines:\n%s", p.name, timeout, p.Tail(5))
	}
}
