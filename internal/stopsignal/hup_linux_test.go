package stopsignal_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTheProgramsOfAProcessStartedIgnoringSIGHUPGetItsDefault: a process
// started with SIGHUP ignored (nohup) that calls ChildrenGetDefaultHUP
// starts its programs (the proxy's scripts) with SIGHUP's default action,
// not ignoring it as they would inherit (a review), and still takes the
// signal itself (a handler, which drops it) rather than dying of it.
func TestTheProgramsOfAProcessStartedIgnoringSIGHUPGetItsDefault(t *testing.T) {
	t.Parallel()
	// masks runs this test binary as mode under sh with SIGHUP ignored,
	// and returns the SigIgn and SigCgt masks of what it started
	// ("child") and of itself ("self").
	masks := func(mode string) map[string]uint64 {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", `trap "" HUP; exec "$0" -test.run='^$'`, os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"="+mode)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v: %s", mode, err, out)
		}
		got := map[string]uint64{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var who, field string
			var mask uint64
			if _, err := fmt.Sscanf(l, "%s %s %x", &who, &field, &mask); err != nil {
				t.Fatalf("%s: line %q: %v", mode, l, err)
			}
			got[who+" "+strings.TrimSuffix(field, ":")] = mask
		}
		return got
	}
	const hup = 1 << 0 // SIGHUP is signal 1: bit 0
	if m := masks("hup-untouched"); m["child SigIgn"]&hup == 0 {
		t.Fatalf("without ChildrenGetDefaultHUP the program started does not ignore SIGHUP (%x): the test does not start the process ignoring it", m["child SigIgn"])
	}
	m := masks("hup")
	if m["child SigIgn"]&hup != 0 {
		t.Errorf("the program started ignores SIGHUP (SigIgn %x), want its default", m["child SigIgn"])
	}
	if m["self SigIgn"]&hup == 0 && m["self SigCgt"]&hup == 0 {
		t.Errorf("the process neither ignores nor catches SIGHUP (SigIgn %x, SigCgt %x): one would kill it", m["self SigIgn"], m["self SigCgt"])
	}
}
