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
func killSession(sid int) error {
	for range sessionSweeps {
		found, err := sweepSession(sid)
		if err != nil {
			return err
		}
		if found == 0 {
			return nil
		}
	}
	return fmt.Errorf("processes of session %d still running after %d passes", sid, sessionSweeps)
}

// sweepSession kills the live processes of session sid and says how many
// it found.
func sweepSession(sid int) (int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, nil // no /proc: the process group kill is all there is
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	found := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if s, live := sessionOf(stat); live && s == sid {
			found++
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return found, fmt.Errorf("killing process %d of session %d: %w", pid, sid, err)
			}
		}
	}
	return found, nil
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
