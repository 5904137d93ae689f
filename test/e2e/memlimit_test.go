//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opsgate/opsgate/internal/gctune"
	"github.com/opsgate/opsgate/internal/proctest"
)

// TestAnAutomatorInACgroupWithAMemoryLimitGivesItsCollectorAShareOfIt: an
// automator started in a cgroup that limits its memory (a container's, a
// systemd unit's MemoryMax=) sets its collector's soft limit (GOMEMLIMIT)
// to 90 % of it and says so; without it, its collector would let garbage
// grow until the kernel killed it. A GOMEMLIMIT in its environment wins.
func TestAnAutomatorInACgroupWithAMemoryLimitGivesItsCollectorAShareOfIt(t *testing.T) {
	t.Parallel()
	var limit int64 = 512 << 20
	cg := newMemoryCgroup(t, limit)
	want := int64(float64(limit) * gctune.Ratio)
	for _, c := range []struct {
		name string
		env  []string
		want int64
		line bool
	}{
		{"cgroup", nil, want, true},
		{"GOMEMLIMIT", []string{"GOMEMLIMIT=100MiB"}, 100 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if r := runCLI(bin.automator, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443"); r.Code != 0 {
				t.Fatalf("automator init: %s", r)
			}
			// The shell joins the cgroup, then becomes the automator.
			p := proctest.StartEnv(t, "automator-"+c.name, append(os.Environ(), c.env...), "/bin/sh", "-c",
				`echo $$ > "$0" && exec "$@"`, filepath.Join(cg, "cgroup.procs"),
				bin.automator, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
			s, err := proctest.WaitServing(p, dir, 15*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got, err := proctest.MetricValue(s.HTTP, "go_gc_gomemlimit_bytes")
			if err != nil {
				t.Fatal(err)
			}
			if int64(got) != c.want {
				t.Errorf("the automator's GOMEMLIMIT is %d, want %d", got, c.want)
			}
			const line = "the automator's cgroup limits its memory to 512 MiB: its garbage collector works harder past 461 MiB (GOMEMLIMIT, 90 % of it)"
			if said := strings.Contains(p.Log(), line); said != c.line {
				t.Errorf("the automator's log says %q: %v, want %v:\n%s", line, said, c.line, p.Log())
			}
		})
	}
}

// newMemoryCgroup makes a cgroup whose memory limit is limit bytes (cgroup
// v1's memory controller, or v2's), removed with what runs in it when the
// test ends; the test is skipped where none can be made (not root, no
// memory controller).
func newMemoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	parent, file := "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
	if _, err := os.Stat(parent); err != nil {
		b, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control")
		if err != nil || !strings.Contains(string(b), "memory") {
			t.Skip("no cgroup memory controller to limit a process's memory with")
		}
		parent, file = "/sys/fs/cgroup", "memory.max"
	}
	dir, err := os.MkdirTemp(parent, "opsgate-test-")
	if err != nil {
		t.Skipf("cannot make a cgroup to limit a process's memory in: %v", err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(time.Minute)
		for {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, p := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(p); err == nil {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
			err := os.Remove(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("removing the test's cgroup: %v", err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, file), []byte(fmt.Sprint(limit)), 0o644); err != nil {
		t.Fatalf("setting the cgroup's %s: %v", file, err)
	}
	return dir
}
