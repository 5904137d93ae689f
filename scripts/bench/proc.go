//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is a child process this program started (automator serve, proxy
// run). It leads its own process group; its output goes to a log file.
type proc struct {
	name     string
	cmd      *exec.Cmd
	logPath  string
	done     chan struct{}
	stopping atomic.Bool // stopped by the bench: its exit is expected
}

// start runs path with args; env is added to this process's environment.
func (b *bench) start(name string, env []string, path string, args ...string) (*proc, error) {
	logPath := filepath.Join(b.tmp, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		close(p.done)
		if !p.stopping.Load() {
			// The section's figures need it: end the section now, with
			// why, rather than measure errors (an automator the kernel
			// killed for its memory kept the idle section's 10,000
			// instances polling a closed port until its timeout).
			b.mu.Lock()
			abort := b.abort
			b.mu.Unlock()
			if abort != nil {
				abort(fmt.Errorf("%s exited while the section ran (%v): %s", name, err, tail(p.log(), 5)))
			}
		}
	}()
	b.mu.Lock()
	b.procs = append(b.procs, p)
	b.mu.Unlock()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to timeout, then kills the group.
func (p *proc) stop(timeout time.Duration) {
	p.stopping.Store(true)
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// waitLog waits until the log holds s; an exit or the timeout is an error.
func (p *proc) waitLog(s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Contains(p.log(), s) {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before logging %q: %s", p.name, s, tail(p.log(), 5))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not log %q within %v: %s", p.name, s, timeout, tail(p.log(), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// stopAll stops every child still running, all at once.
func (b *bench) stopAll() {
	b.mu.Lock()
	procs := b.procs
	b.procs = nil
	b.mu.Unlock()
	for _, p := range procs {
		p.stopping.Store(true)
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		p.stop(10 * time.Second)
	}
}

// run runs a short command to its end and returns its stdout.
func run(path string, args ...string) (string, error) {
	cmd := exec.Command(path, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// ---- /proc ----

// userHZ is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// cpuSeconds is the CPU time (user + system, all threads) pid has used.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// "pid (comm) state ppid ...": fields after the last ')' start at
	// field 3; utime and stime are fields 14 and 15.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("malformed /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / userHZ, nil
}

// rssBytes is the resident set size of pid (VmRSS).
func rssBytes(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, errors.New("no VmRSS line")
}

// treeCPUSeconds is the CPU time of pid and of its children, running or
// reaped (a PostgreSQL server: the postmaster and its backends).
func treeCPUSeconds(pid int) (float64, error) {
	total, err := cpuSeconds(pid)
	if err != nil {
		return 0, err
	}
	// Reaped children: cutime and cstime (fields 16 and 17) of pid.
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(data)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) >= 15 {
			cu, _ := strconv.ParseInt(f[13], 10, 64)
			cs, _ := strconv.ParseInt(f[14], 10, 64)
			total += float64(cu+cs) / userHZ
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return total, nil
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			if c, err := cpuSeconds(child); err == nil {
				total += c
			}
		}
	}
	return total, nil
}

// treeSuffix marks a metered name whose pid is a process tree.
const treeSuffix = " (all processes)"

// cpuMeter measures the CPU used by named processes over an interval, as a
// percentage of one core. A name ending in treeSuffix counts the process
// and its children.
type cpuMeter struct {
	pids  map[string]int
	start map[string]float64
	t0    time.Time
}

// machineName is the meter's entry for every process of the machine, this
// benchmark's and everyone else's: the machine is shared, and what others
// use shows how noisy a measurement was. stealName is the time the
// hypervisor gave this virtual machine's cores to others while they had
// work: time every process here lost, which shows in latencies.
const (
	machineName = "whole machine"
	stealName   = "stolen by the hypervisor"
)

func meterCPU(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: make(map[string]float64), t0: time.Now()}
	for name, pid := range pids {
		m.start[name], _ = cpuOf(name, pid)
	}
	if busy, steal, err := machineSeconds(); err == nil {
		m.start[machineName], m.start[stealName] = busy, steal
	}
	return m
}

// machineSeconds reads /proc/stat: the CPU time all cores spent since boot
// running something (neither idle, nor waiting for I/O, nor stolen), and
// the time stolen from them.
func machineSeconds() (busy, steal float64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	b, st, err := parseProcStat(string(data))
	return float64(b) / userHZ, float64(st) / userHZ, err
}

// parseProcStat reads the first line of /proc/stat ("cpu" and the ticks of
// user nice system idle iowait irq softirq steal guest guest_nice, the last
// ones absent on old kernels) into the busy and stolen ticks. Guest time is
// already counted in user.
func parseProcStat(data string) (busy, steal int64, err error) {
	line, _, _ := strings.Cut(data, "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, errors.New("malformed /proc/stat")
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("malformed /proc/stat: %w", err)
		}
		switch {
		case i == 7:
			steal = n
		case i == 3 || i == 4 || i >= 8:
		default:
			busy += n
		}
	}
	return busy, steal, nil
}

func cpuOf(name string, pid int) (float64, error) {
	if strings.HasSuffix(name, treeSuffix) {
		return treeCPUSeconds(pid)
	}
	return cpuSeconds(pid)
}

// read returns each process's CPU since the meter started, in % of one core.
func (m *cpuMeter) read() map[string]float64 {
	el := time.Since(m.t0).Seconds()
	out := make(map[string]float64, len(m.pids))
	for name, pid := range m.pids {
		now, err := cpuOf(name, pid)
		if err != nil {
			continue
		}
		out[name] = 100 * (now - m.start[name]) / el
	}
	if busy, steal, err := machineSeconds(); err == nil {
		out[machineName] = 100 * (busy - m.start[machineName]) / el
		out[stealName] = 100 * (steal - m.start[stealName]) / el
	}
	return out
}

// describeCPU renders CPU shares as "automator 95 %, proxies 40 %, ...".
func describeCPU(shares map[string]float64, order ...string) string {
	var parts []string
	total := 0.0
	for _, name := range order {
		if v, ok := shares[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f %%", name, v))
			total += v
		}
	}
	desc := fmt.Sprintf("CPU %s (total %.0f %% of %d cores)", strings.Join(parts, ", "), total, numCPU())
	if all, ok := shares[machineName]; ok {
		desc += fmt.Sprintf(", whole machine %.0f %%", all)
	}
	if st := shares[stealName]; st >= 0.5 {
		desc += fmt.Sprintf(", %s %.0f %%", stealName, st)
	}
	return desc
}

// ---- limits ----

// raiseNoFile raises this process's open-file limit to want (or as far as
// allowed); children inherit it, so the automator can hold as many
// connections as this program opens.
func raiseNoFile(want uint64) (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	n := syscall.Rlimit{Cur: want, Max: max(want, r.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &n); err != nil {
		// Unprivileged: only up to the hard limit.
		n = syscall.Rlimit{Cur: min(want, r.Max), Max: r.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &n); err != nil {
			return r.Cur, err
		}
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	return r.Cur, nil
}
