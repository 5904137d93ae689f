//go:build linux

package main

import (
	"strings"
	"testing"
)

// TestParseProcStat: busy time leaves out idle, I/O wait, steal and guest
// time (guest is inside user); steal comes apart, for the rows' detail.
func TestParseProcStat(t *testing.T) {
	const stat = "cpu  100 2 30 5000 40 6 7 80 9 1\ncpu0 50 1 15 2500 20 3 3 40 4 0\n"
	busy, steal, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if busy != 100+2+30+6+7 || steal != 80 {
		t.Fatalf("busy %d, steal %d; want 145 and 80", busy, steal)
	}
	// An old kernel without the steal and guest columns.
	if busy, steal, err = parseProcStat("cpu 1 2 3 4 5 6 7\n"); err != nil || busy != 1+2+3+6+7 || steal != 0 {
		t.Fatalf("old format: busy %d, steal %d, %v; want 19, 0, nil", busy, steal, err)
	}
	for _, bad := range []string{"", "intr 1 2 3 4 5 6\n", "cpu 1 2 x 4 5 6\n"} {
		if _, _, err := parseProcStat(bad); err == nil || !strings.Contains(err.Error(), "malformed /proc/stat") {
			t.Errorf("parseProcStat(%q) = %v, want a malformed /proc/stat error", bad, err)
		}
	}
}

// TestDescribeCPUNamesStolenTime: the detail of a row says how much time
// the hypervisor took, when it took any worth naming.
func TestDescribeCPUNamesStolenTime(t *testing.T) {
	got := describeCPU(map[string]float64{"automator": 95, machineName: 150, stealName: 3.4}, "automator")
	if !strings.HasSuffix(got, "whole machine 150 %, stolen by the hypervisor 3 %") {
		t.Errorf("describeCPU = %q, want it to end with the whole machine and the stolen time", got)
	}
	if got := describeCPU(map[string]float64{"automator": 95, machineName: 150, stealName: 0.2}, "automator"); strings.Contains(got, "stolen") {
		t.Errorf("describeCPU = %q: names a stolen time below half a per cent", got)
	}
}
