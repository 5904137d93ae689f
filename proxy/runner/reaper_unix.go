//go:build !windows

package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaperRetry is how long after a failed start of the reaper the next
// script tries again: scripts meanwhile run without one.
const reaperRetry = time.Minute

// Reaper is the proxy side of the reaper process (see ServeReaper): it
// starts the process at the first script, registers each script's session
// with it and deregisters it once Run is done with it. A nil *Reaper does
// nothing. Its methods are safe for concurrent use.
type Reaper struct {
	onError func(error)

	mu      sync.Mutex
	w       *os.File        // write end of the reaper's stdin; nil when none runs
	wc      syscall.RawConn // w's, for writes that never wait
	cmd     *exec.Cmd       // the running reaper, when w is set
	exited  chan struct{}   // closed once cmd has been waited for
	retryAt time.Time       // after a failed start: no new try before
	env     []string        // the reaper's environment (ReaperLog)
	live    map[int]session
	// starting holds the units whose script is being started: told to the
	// reaper ("? WORK_ID") before the start, so that a proxy that dies
	// before it registers the script's session still has it killed, until
	// the registration or notStarted.
	starting map[string]bool
	// gone holds the deregistrations (and called-off starts) not yet
	// written: they go with the next write, so that a script's end costs
	// the reaper no wake-up of its own (a session left registered a while after it
	// ended is harmless: reapSession finds nothing of it, and a reused pid
	// has another start time). Close writes them first, and so does a
	// write once they reach maxGone bytes.
	gone []byte
	// exe is the binary started in reaper mode: the proxy's own, which
	// handles ReaperEnv first thing in main. A field so tests can point
	// elsewhere.
	exe func() (string, error)
	// stderr is the reaper's: where the proxy's own stderr goes, which
	// outlives the proxy. A field so tests can read it.
	stderr *os.File
}

// session is a script's session registered with the reaper: its leader's
// start time, and the unit whose script it is.
type session struct {
	start uint64
	work  string
}

// NewReaper returns the reaper of this process's scripts; it starts no
// process yet. Only a binary whose main serves ReaperEnv first (the proxy's)
// may make one: the reaper is that binary run again. onError is told,
// once per failure, when the reaper cannot be started or reached: scripts
// then run without it (they outlive a proxy that dies). The reaper writes
// its lines as log says.
func NewReaper(onError func(error), log ReaperLog) *Reaper {
	if onError == nil {
		onError = func(error) {}
	}
	return &Reaper{onError: onError, env: log.environ(), live: map[int]session{}, starting: map[string]bool{}, exe: os.Executable, stderr: os.Stderr}
}

// Close ends the reaper, if one runs: it reads EOF and exits, killing the
// sessions still registered (none, once every Run has returned). It waits
// for it a few seconds, then kills it.
func (r *Reaper) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopLocked()
}

// maxGone bounds Reaper.gone: well under PIPE_BUF (4096), so that it and a
// registration go in one write, which a pipe never splits.
const maxGone = 2048

// stopLocked closes the pipe and reaps the reaper.
func (r *Reaper) stopLocked() error {
	if r.w == nil {
		return nil
	}
	if len(r.gone) > 0 {
		// Best effort: else the reaper looks for those sessions in vain.
		gone := r.gone
		r.gone = nil
		if r.writeLocked(gone) != nil {
			return nil // writeLocked stopped it
		}
	}
	err := r.w.Close()
	r.w, r.wc = nil, nil
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	r.cmd = nil
	return err
}

// startLocked starts the reaper and registers with it the sessions
// already live (those a reaper that died had registered). It returns an
// error only for a failed start, which onError has not been told yet.
func (r *Reaper) startLocked() error {
	exe, err := r.exe()
	if err != nil {
		return fmt.Errorf("finding the proxy's executable: %w", err)
	}
	// Close-on-exec, both ends: no script inherits them.
	rd, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("making its pipe: %w", err)
	}
	wc, err := w.SyscallConn()
	if err != nil {
		rd.Close()
		w.Close()
		return fmt.Errorf("making its pipe: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = r.env
	cmd.Dir = "/" // hold no directory of the proxy's busy
	cmd.Stdin = rd
	cmd.Stderr = r.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	rd.Close() // only the reaper reads: EOF when the proxy dies, EPIPE when the reaper does
	if err != nil {
		w.Close()
		return fmt.Errorf("starting %s: %w", exe, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	r.w, r.wc, r.cmd, r.exited = w, wc, cmd, exited
	r.gone = nil // the new one was told of none of those
	for sid, s := range r.live {
		if err := r.writeLocked(registration(sid, s)); err != nil {
			return nil // the new one is gone already: the next script tries again
		}
	}
	for work := range r.starting {
		if err := r.writeLocked(startingLine(work)); err != nil {
			return nil
		}
	}
	return nil
}

// startingLine is the line that says the script of unit work is starting
// ("? WORK_ID", ServeReaper).
func startingLine(work string) []byte {
	return append(append([]byte("? "), work...), '\n')
}

// environ is the reaper's environment: ReaperEnv, and how it logs.
func (l ReaperLog) environ() []string {
	env := []string{ReaperEnv + "=1"}
	if l.JSON {
		env = append(env, reaperFormatEnv+"=json")
	}
	if l.InstanceID != "" && !strings.ContainsRune(l.InstanceID, 0) {
		env = append(env, reaperInstanceEnv+"="+l.InstanceID)
	}
	return env
}

// registration is the lines that register session sid: "+ SID START", and
// "= SID WORK_ID" when its unit is known (ServeReaper).
func registration(sid int, s session) []byte {
	b := append([]byte("+ "), strconv.Itoa(sid)...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.start, 10)
	b = append(b, '\n')
	if s.work != "" {
		b = append(append(b, "= "...), strconv.Itoa(sid)...)
		b = append(append(append(b, ' '), s.work...), '\n')
	}
	return b
}

// writeLocked writes one line to the reaper. When that fails (the reaper
// died: EPIPE; it stopped reading, stopped or stuck, and the pipe is full:
// EAGAIN, at once, rather than hold up every script), it tells onError,
// stops the reaper and returns the error.
func (r *Reaper) writeLocked(line []byte) error {
	var n int
	var err error
	if cerr := r.wc.Write(func(fd uintptr) bool {
		n, err = unix.Write(int(fd), line)
		return true // never wait: the pipe is non-blocking (os.Pipe)
	}); cerr != nil {
		err = cerr
	}
	if err == nil && n == len(line) {
		return nil
	}
	if err == nil {
		err = errors.New("short write")
	}
	cmd := r.cmd
	_ = cmd.Process.Kill()
	_ = r.stopLocked()
	if ws, ok := waitStatus(cmd); ok && !(ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
		// It ended by itself, not killed (by someone, or the OOM
		// killer: a new one is started at once): one started again at
		// once would most likely end so too (the host out of threads,
		// its binary replaced by a broken one), at every script, each
		// time writing its last words to the log.
		r.retryAt = time.Now().Add(reaperRetry)
		r.onError(fmt.Errorf("the reaper of this proxy's scripts (pid %d) ended by itself (%v) and cannot be reached (%w); scripts run without it, and outlive a proxy that dies (trying again in %v)", cmd.Process.Pid, cmd.ProcessState, err, reaperRetry))
		return err
	}
	r.onError(fmt.Errorf("the reaper of this proxy's scripts (pid %d) cannot be reached (%w); starting a new one", cmd.Process.Pid, err))
	return err
}

// prepare starts the reaper unless one runs, before a script is started,
// so that the script is registered a moment after its fork, and tells it
// that the script of unit work is starting ("" when its environment does
// not hold its id in WorkIDVar: nothing is told). A proxy that dies after
// the start and before the registration still has the script killed: the
// reaper finds it by that variable. Every prepare with a work id is
// followed by the script's registration or by notStarted.
func (r *Reaper) prepare(work string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ensureLocked()
	if work == "" || !plainWord(work) {
		return
	}
	r.starting[work] = true
	if r.w != nil {
		line := append(r.gone, startingLine(work)...)
		r.gone = nil
		if r.writeLocked(line) != nil {
			r.ensureLocked() // a new one, told of this start too
		}
	}
}

// notStarted tells the reaper that the script of unit work, prepared, did
// not start. It goes with the next write, as deregistrations do: a reaper
// that looks for a script that never started finds nothing.
func (r *Reaper) notStarted(work string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.starting[work] {
		return
	}
	delete(r.starting, work)
	if r.w != nil {
		r.gone = append(append(append(r.gone, "! "...), work...), '\n')
		r.flushGoneLocked()
	}
}

// flushGoneLocked writes r.gone once it reaches maxGone bytes; until then
// it goes with the next registration, or Close.
func (r *Reaper) flushGoneLocked() {
	if len(r.gone) < maxGone {
		return
	}
	gone := r.gone
	r.gone = nil
	if r.writeLocked(gone) != nil && (len(r.live) > 0 || len(r.starting) > 0) {
		r.ensureLocked() // for the sessions still live, and the starts
	}
}

// ensureLocked starts the reaper unless one runs, or a start failed less
// than reaperRetry ago.
func (r *Reaper) ensureLocked() {
	if r.w != nil || time.Now().Before(r.retryAt) {
		return
	}
	if err := r.startLocked(); err != nil {
		r.retryAt = time.Now().Add(reaperRetry)
		r.onError(fmt.Errorf("starting the reaper that kills this proxy's scripts if the proxy dies: %w; scripts run without it, and outlive a proxy that dies (trying again in %v)", err, reaperRetry))
	}
}

// register tells the reaper of the session the script pid leads, of unit
// work (its id; "" when not known). Run calls it before it waits for the
// script, so the pid cannot have been reused yet. It returns the
// deregistration, for when Run is done with the session (its tree killed,
// the script reaped).
func (r *Reaper) register(pid int, work string) (deregister func()) {
	if r == nil {
		return func() {}
	}
	start, err := processStartTime(pid)
	if err != nil {
		start = 0 // no /proc: the reaper cannot check for a reused pid
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ensureLocked()
	if !plainWord(work) {
		work = "" // a line of its own would say something else
	}
	s := session{start: start, work: work}
	r.live[pid] = s
	delete(r.starting, work) // its "= SID WORK_ID" ends the start for the reaper too
	if r.w != nil {
		line := append(r.gone, registration(pid, s)...)
		r.gone = nil
		if r.writeLocked(line) != nil {
			r.ensureLocked() // a new one, told of every live session, this one too
		}
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.live, pid)
		if r.w == nil {
			return
		}
		r.gone = append(append(append(r.gone, "- "...), strconv.Itoa(pid)...), '\n')
		r.flushGoneLocked()
	}
}

// plainWord tells whether w is one word of printable ASCII, at most 64
// bytes: what a registration line may hold.
func plainWord(w string) bool {
	if len(w) > 64 {
		return false
	}
	for i := 0; i < len(w); i++ {
		if w[i] <= ' ' || w[i] >= 0x7f {
			return false
		}
	}
	return true
}

// ignoreStopSignals keeps the reaper running when the proxy is asked to
// stop: it ends when the proxy does.
func ignoreStopSignals() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
}

// reapSession kills the process tree of session sid, registered with its
// leader's start time, unless the leader's pid now belongs to another
// process (a different start time). A session whose leader is gone may
// still have members, found by the session id, which cannot be reused
// while one lives. A session of which nothing lives is left alone: the
// script ended before the proxy died, which had not yet written its
// deregistration (they go with the next registration). It reports whether
// it killed (or tried to).
func reapSession(sid int, start uint64) (bool, error) {
	if start != 0 {
		if now, err := processStartTime(sid); err == nil && now != start {
			return false, nil // the pid was reused: no member of the script's session lives
		}
	}
	if !sessionLives(sid) {
		return false, nil
	}
	t := &processTree{pgid: sid}
	// Descendants that left the session first, while the script links
	// them to it (the start time above says sid is still the script).
	return true, errors.Join(t.killDescendants(), t.kill(), t.killRest())
}

// sessionLives reports whether a process of session sid may still live:
// where /proc lists the processes, one of the session that is not a
// zombie (liveSessionMember); elsewhere a member of its process group (or
// one that cannot be asked: EPERM).
func sessionLives(sid int) bool {
	if live, known := liveSessionMember(sid); known {
		return live
	}
	if err := syscall.Kill(-sid, 0); !errors.Is(err, syscall.ESRCH) {
		return true
	}
	return sessionHasMember(sid)
}

// waitStatus is how cmd's process ended, and false when that is not known
// (its Wait failed).
func waitStatus(cmd *exec.Cmd) (syscall.WaitStatus, bool) {
	if cmd.ProcessState == nil {
		return 0, false
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws, ok
}
