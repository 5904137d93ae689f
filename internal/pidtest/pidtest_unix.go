//go:build !windows

package pidtest

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Gone reports whether pid no longer runs. A zombie counts as gone: it has
// been killed and only waits for a reaper, and in a container whose PID 1
// never reaps orphans it stays a zombie forever.
func Gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		// Without /proc (not Linux), only the signal above can tell.
		return errors.Is(err, os.ErrNotExist) && procMounted()
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses, so the
	// state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func procMounted() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// ScriptPIDs reads the pids a script wrote to the file at path, its child's
// and its own ("$! $$"), failing the test unless there are two. Those of
// them still running when the test ends are killed then.
func ScriptPIDs(t testing.TB, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pid file %q: %v", b, err)
		}
		pids = append(pids, p)
	}
	if len(pids) != 2 {
		t.Fatalf("pid file %q: want the child's and the script's pid", b)
	}
	t.Cleanup(func() {
		for _, p := range pids {
			if !Gone(p) {
				if pr, err := os.FindProcess(p); err == nil {
					_ = pr.Kill()
				}
			}
		}
	})
	return pids
}
