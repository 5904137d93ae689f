package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// sessionSweeps bounds the passes of killSession: each pass kills what it
// finds, and a process can only add to the session by forking, so a pass
// finds nothing once the last forker is dead.
const sessionSweeps = 50

// killSession sends SIGKILL to every live process of session sid, pass
// after pass, until a pass finds none. Zombies are skipped: they are dead,
// and a zombie whose parent does not reap it stays forever.
// A process that cannot be signalled (one that became another user's,
// through a setuid program) is reported, and not looked for again.
func killSession(sid int) error {
	refused := map[int]error{}
	for range sessionSweeps {
		killed, err := sweepSession(sid, refused)
		if err != nil || killed == 0 {
			return errors.Join(err, refusedError(sid, refused))
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

// sweepSession sends SIGKILL to the live processes of session sid, except
// those in refused, and says how many it signalled; it adds those that
// refused the signal to refused.
func sweepSession(sid int, refused map[int]error) (int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, nil // no /proc: the process group kill is all there is
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	killed := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		if _, ok := refused[pid]; ok {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if s, live := sessionOf(stat); live && s == sid {
			switch err := syscall.Kill(pid, syscall.SIGKILL); {
			case err == nil:
				killed++
			case !errors.Is(err, syscall.ESRCH):
				refused[pid] = err
			}
		}
	}
	return killed, nil
}

// sessionOf reads the session id from a /proc/PID/stat line, and whether
// the process is alive (not a zombie, not dead).
func sessionOf(stat []byte) (sid int, live bool) {
	// pid (comm) state ppid pgrp session ...: comm may hold spaces and
	// parentheses, so the fields are counted after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 4 {
		return 0, false
	}
	sid, err := strconv.Atoi(string(f[3]))
	if err != nil {
		return 0, false
	}
	return sid, f[0][0] != 'Z' && f[0][0] != 'X'
}
