package automatortest

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

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
			if !ProcessGone(p) {
				if pr, err := os.FindProcess(p); err == nil {
					_ = pr.Kill()
				}
			}
		}
	})
	return pids
}

// ProcessGone reports whether pid has exited (a zombie not yet reaped
// counts as exited: it runs nothing).
func ProcessGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may hold spaces, so look after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
