package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"maps"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sessionSweeps bounds the passes of a session sweep: each pass kills what
// it finds, and a process can only add to the session by forking, so a pass
// finds nothing new once the last forker is dead.
const sessionSweeps = 50

// killSession sends SIGKILL to every process of session sid, looking at
// every process the OS lists, pass after pass, until a pass finds none it
// has not signalled yet (a zombie, signalled once, is not looked for
// again: it is dead, and one whose parent does not reap it stays forever).
// A process that cannot be signalled (one that became another user's,
// through a setuid program) is reported, and not looked for again.
func killSession(sid int) error {
	return sweepSession(sid, allPids)
}

// sessionHasMember reports whether a process of session sid is alive, a
// zombie included; true when the processes cannot be listed (a kill is
// then tried, as if one were).
func sessionHasMember(sid int) bool {
	pids, err := allPids()
	if err != nil {
		return true
	}
	for pid := range pids {
		if s, err := unix.Getsid(pid); err == nil && s == sid {
			return true
		}
	}
	return false
}

// Bounds of the cheap sweep after a normal exit (killLeftovers): it looks
// only at the pids handed out since the script started, and only when the
// script ran for at most quickSweepRun and they are at most quickSweepPids.
// Otherwise it looks at every process, as killSession does: that costs
// about a syscall per process, more than a whole tiny script does, and is
// small next to a script that ran for over a second. Variables so tests can
// take the other path.
var (
	quickSweepRun  = time.Second
	quickSweepPids = 4096
)

// killSessionAfterExit is killSession after a normal exit of a script that
// led session sid and ran for ran. Every process of the session is a
// descendant of the script, so its pid was handed out after the script's:
// between sid and the namespace's last pid, going round at pid_max. (Unless
// pids went round a whole turn meanwhile, which is why ran is bounded: that
// takes at least 32768 forks.)
func killSessionAfterExit(sid int, ran time.Duration) error {
	if ran > quickSweepRun {
		return killSession(sid)
	}
	return sweepSession(sid, func() (iter.Seq[int], error) {
		last, err := readProcInt("/proc/sys/kernel/ns_last_pid")
		if err != nil {
			return allPids()
		}
		max := 0
		if last < sid {
			if max, err = readProcInt("/proc/sys/kernel/pid_max"); err != nil {
				return allPids()
			}
		}
		if pids := pidsSince(sid, last, max); pids != nil {
			return pids, nil
		}
		return allPids()
	})
}

// pidsSince lists the pids handed out after sid up to last, going round
// from pid_max-1 to 1 when last < sid; nil when they are more than
// quickSweepPids.
func pidsSince(sid, last, pidMax int) iter.Seq[int] {
	if last >= sid {
		if last-sid > quickSweepPids {
			return nil
		}
		return pidRange(sid+1, last)
	}
	if pidMax-1-sid+last > quickSweepPids {
		return nil
	}
	return func(yield func(int) bool) {
		for pid := range pidRange(sid+1, pidMax-1) {
			if !yield(pid) {
				return
			}
		}
		for pid := range pidRange(1, last) {
			if !yield(pid) {
				return
			}
		}
	}
}

// sweepSession sends SIGKILL to the processes of session sid among those
// that candidates lists, pass after pass, until a pass finds none it has
// not signalled yet. A process's session is asked with getsid(2): one
// syscall, where reading /proc/PID/stat costs several.
func sweepSession(sid int, candidates func() (iter.Seq[int], error)) error {
	var signalled map[int]bool
	var refused map[int]error // made when first needed: most sweeps find nothing
	for range sessionSweeps {
		pids, err := candidates()
		if err != nil {
			return errors.Join(err, refusedError(sid, refused))
		}
		found := 0
		for pid := range pids {
			if signalled[pid] || refused[pid] != nil {
				continue
			}
			if s, err := unix.Getsid(pid); err != nil || s != sid {
				continue // gone, or of another session
			}
			switch err := syscall.Kill(pid, syscall.SIGKILL); {
			case err == nil:
				if signalled == nil {
					signalled = map[int]bool{}
				}
				signalled[pid] = true
				found++
			case !errors.Is(err, syscall.ESRCH):
				if refused == nil {
					refused = map[int]error{}
				}
				refused[pid] = err
			}
		}
		if found == 0 {
			return refusedError(sid, refused)
		}
	}
	return errors.Join(fmt.Errorf("processes of session %d still running after %d passes", sid, sessionSweeps), refusedError(sid, refused))
}

func refusedError(sid int, refused map[int]error) error {
	for pid, err := range refused {
		more := ""
		if len(refused) > 1 {
			more = fmt.Sprintf(" (and %d more)", len(refused)-1)
		}
		return fmt.Errorf("killing process %d of session %d%s: %w", pid, sid, more, err)
	}
	return nil
}

// allPids lists every process in /proc. Without /proc (none mounted) it
// lists none: the process group kill is all there is. A /proc that cannot
// be read (the proxy out of file descriptors) is an error, not a host
// without processes: a sweep that found none would say it killed all.
func allPids() (iter.Seq[int], error) {
	d, err := os.Open("/proc")
	if errors.Is(err, fs.ErrNotExist) {
		return func(func(int) bool) {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	return func(yield func(int) bool) {
		for _, name := range names {
			if pid, err := strconv.Atoi(name); err == nil && pid > 0 && !yield(pid) {
				return
			}
		}
	}, nil
}

// pidRange yields from to to, both included.
func pidRange(from, to int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for pid := from; pid <= to; pid++ {
			if !yield(pid) {
				return
			}
		}
	}
}

// readProcInt reads a number from a /proc file, without the allocations
// of os.ReadFile: it is read after every script.
func readProcInt(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var buf [32]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(bytes.TrimSpace(buf[:max(n, 0)])))
}

// killDescendants kills every descendant of process root, the script, found
// through their parents, wherever they are: also one that left the
// script's session (setsid) and so escapes the group and session kills. It
// must run before those, while root and its descendants still link it to
// them: a process whose parent dies is handed to another. So it first
// stops root's group and then, pass after pass, each descendant not
// stopped yet, until a pass finds none (a stopped process forks no more,
// so the tree stops growing), and only then kills what it stopped. A
// process that cannot be signalled (one that became another user's,
// through a setuid program) is reported.
func killDescendants(root int) error {
	_ = syscall.Kill(-root, syscall.SIGSTOP) // the script's group: it forks no more
	stopped := map[int]bool{}
	var refused []error
	for range sessionSweeps {
		children, err := processChildren()
		if err != nil {
			refused = append(refused, err)
			break
		}
		found := 0
		queue := []int{root}
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			for _, c := range children[pid] {
				queue = append(queue, c)
				if stopped[c] {
					continue
				}
				switch err := syscall.Kill(c, syscall.SIGSTOP); {
				case err == nil:
					stopped[c] = true
					found++
				case !errors.Is(err, syscall.ESRCH):
					stopped[c] = true // not tried again
					refused = append(refused, fmt.Errorf("stopping process %d, a descendant of the script: %w", c, err))
				}
			}
		}
		if found == 0 {
			break
		}
	}
	for pid := range stopped {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) && !errors.Is(err, syscall.EPERM) {
			refused = append(refused, fmt.Errorf("killing process %d, a descendant of the script: %w", pid, err))
		}
	}
	return errors.Join(refused...)
}

// processChildren maps each process the OS lists to its children, read
// from /proc/PID/stat; a process gone meanwhile is left out.
func processChildren() (map[int][]int, error) {
	pids, err := allPids()
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for pid := range pids {
		f, err := statFields(pid)
		if err != nil || len(f) < 4-2 {
			continue
		}
		if ppid, err := strconv.Atoi(string(f[4-3])); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	return children, nil
}

// startingScripts finds the sessions of the scripts of the units in
// starting: scripts that a proxy which died was starting, and had not yet
// registered with its reaper. Each is found as a session leader whose
// environment (/proc/PID/environ) holds WorkIDVar set to one of those ids,
// descendants in sessions of their own included. A leader between its fork
// and its exec still has the proxy's environment, so it looks again every
// 10 ms until a session of each unit was found or within has passed (a
// script that never started is looked for that long).
func startingScripts(starting map[string]bool, within time.Duration) map[int]foundSession {
	found := map[int]foundSession{}
	missing := maps.Clone(starting)
	deadline := time.Now().Add(within)
	for {
		pids, err := allPids()
		if err != nil {
			return found
		}
		for pid := range pids {
			if _, ok := found[pid]; ok {
				continue
			}
			if sid, err := unix.Getsid(pid); err != nil || sid != pid {
				continue
			}
			work, ok := environValue(pid, WorkIDVar)
			if !ok || !starting[work] {
				continue
			}
			start, err := processStartTime(pid)
			if err != nil {
				continue
			}
			found[pid] = foundSession{start: start, work: work}
			delete(missing, work)
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// environValue returns the value of variable name in process pid's
// environment as it was exec'd, and false when it has none or it cannot be
// read (another user's process, or gone).
func environValue(pid int, name string) (string, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", false
	}
	prefix := name + "="
	for kv := range bytes.SplitSeq(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(prefix)); ok {
			return string(v), true
		}
	}
	return "", false
}

// liveSessionMember reports whether a process of session sid lives that
// is not a zombie, by /proc (known false when /proc cannot be listed). A
// zombie, killed already and waiting for its parent (PID 1, on a host
// whose init reaps late) to collect it, takes no signal and runs nothing:
// a session of zombies only has ended (a review: the reaper's line named
// units that had ended before their proxy was killed, as killed by it).
func liveSessionMember(sid int) (live, known bool) {
	pids, err := allPids()
	if err != nil {
		return false, false
	}
	for pid := range pids {
		if s, err := unix.Getsid(pid); err != nil || s != sid {
			continue
		}
		if f, err := statFields(pid); err != nil || len(f) == 0 || (string(f[0]) != "Z" && string(f[0]) != "X") {
			return true, true // a zombie's stat is always there: one that cannot be read is taken as living
		}
	}
	return false, true
}

// statFields returns the fields of /proc/PID/stat from the third (state)
// on: field n is at index n-3.
func statFields(pid int) ([][]byte, error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var buf [1024]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return nil, err
	}
	stat := buf[:max(n, 0)]
	// pid (comm) state ppid ...: comm may hold spaces and parentheses, so
	// the fields are counted from the last ')'; state is field 3.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, fmt.Errorf("reading /proc/%d/stat: no ')'", pid)
	}
	return bytes.Fields(stat[i+1:]), nil
}

// processStartTime returns when process pid started, in clock ticks since
// boot (field 22 of /proc/PID/stat): with the pid, it names one process,
// never another that reuses the pid later.
func processStartTime(pid int) (uint64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 22-2 {
		return 0, fmt.Errorf("reading /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(string(f[22-3]), 10, 64)
}
