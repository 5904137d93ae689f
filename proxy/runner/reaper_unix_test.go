//go:build !windows

package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/pidtest"
)

// deathTreeScript starts a background child in the script's group, one in a
// group of its own (timeout(1)) and one in a session of its own
// (setsid(1)), writes the pids of all four to "$1/pids" and waits.
const deathTreeScript = `sleep 600 &
a=$!
timeout 600 sleep 600 &
b=$!
setsid sleep 600 &
c=$!
echo $$ $a $b $c > "$1/pids.tmp" && mv "$1/pids.tmp" "$1/pids"
wait
`

// TestScriptsOfAProxyKilledWithSIGKILLAreKilled: guarantee 7 holds when
// the proxy itself dies (SIGKILL, a crash, the OOM killer) while a script
// runs: its reaper kills the script's whole tree, a descendant in a group
// of its own and one in a session of its own included, instead of leaving
// it to run past its deadline. (A script killed before the reaper walks
// its tree, as SIGKILL for parent-death signal did, leaves the last one
// to run on: a review.)
func TestScriptsOfAProxyKilledWithSIGKILLAreKilled(t *testing.T) {
	t.Parallel()
	killProxyMidScript(t, false)
}

// TestAScriptStartedAsItsProxyDiedIsKilled: a proxy that dies between a
// script's start and its registration with the reaper (the proxy held
// there, as a script that kills its proxy first thing found it in one run
// in three: a review) still has the script's whole tree killed: the reaper
// was told the unit's script was starting, and finds its session by the
// unit's id in its environment.
func TestAScriptStartedAsItsProxyDiedIsKilled(t *testing.T) {
	t.Parallel()
	killProxyMidScript(t, true)
}

// killProxyMidScript runs deathTreeScript in a child of this test binary
// acting as a proxy (runAsProxy), held between the script's start and its
// registration with the reaper when unregistered, SIGKILLs the child once
// the script wrote its pids, and checks that the reaper killed the
// script's whole tree and said so in the proxy's log format.
func killProxyMidScript(t *testing.T, unregistered bool) {
	t.Helper()
	for _, c := range []string{"timeout", "setsid"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("no %s command", c)
		}
	}
	dir := t.TempDir()
	writeScript(t, dir, "s.sh", deathTreeScript)
	log := filepath.Join(t.TempDir(), "proxy.log")
	logf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	proxy := exec.Command(os.Args[0], "-test.run=^$")
	proxy.Env = append(os.Environ(), proxyChildEnv+"="+dir)
	if unregistered {
		proxy.Env = append(proxy.Env, proxyChildUnregisteredEnv+"=1")
	}
	proxy.Stdout, proxy.Stderr = logf, logf
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Process.Kill(); _ = proxy.Wait() })

	waitFor(t, "the script to write its pids", func() bool { _, err := os.Stat(filepath.Join(dir, "pids")); return err == nil }, 10*time.Second)
	pids := readPids(t, filepath.Join(dir, "pids"))
	if len(pids) != 4 {
		t.Fatalf("the script wrote %v, want 4 pids", pids)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(-pids[2], syscall.SIGKILL) // timeout(1)'s group, its child too
	})
	if err := proxy.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = proxy.Wait()
	end := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !pidtest.Gone(pid) {
			if time.Now().After(end) {
				data, _ := os.ReadFile(log)
				t.Fatalf("10s after the proxy was SIGKILLed, process %d of its script's tree (script, child, child under timeout, child under setsid: %v) still runs; the proxy's log:\n%s", pid, pids, data)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Its line is the proxy's: JSON, naming the instance and the unit.
	var said reaperRecord
	waitFor(t, "the reaper to say what it killed", func() bool {
		data, _ := os.ReadFile(log)
		for _, l := range strings.Split(string(data), "\n") {
			if json.Unmarshal([]byte(l), &said) == nil && said.Msg != "" {
				return true
			}
		}
		return false
	}, 10*time.Second)
	// The script's session; when the reaper found the script by its unit's
	// id, also the one its setsid(1) child leads, if the child had called
	// setsid by then: it carries the id too.
	want, work := pids[:1], childWorkID
	if unregistered {
		want, work = []int{pids[0], pids[3]}, childUnregisteredWork
		slices.Sort(want)
		if !slices.Contains(said.Sessions, pids[3]) {
			want = pids[:1]
		}
	}
	if said.Level != "ERROR" || said.Msg != "the proxy ended with scripts running; its reaper killed the process trees of their sessions" ||
		said.InstanceID != childInstance || !slices.Equal(said.Sessions, want) || said.ReaperPID <= 1 ||
		len(said.WorkIDs) != len(want) || slices.ContainsFunc(said.WorkIDs, func(w string) bool { return w != work }) {
		t.Errorf("the reaper said %+v; want an ERROR that it killed sessions %v of unit %s, naming instance %s and its own pid", said, want, work, childInstance)
	}
}

// reaperRecord is the reaper's JSON line.
type reaperRecord struct {
	Level, Msg string
	InstanceID string   `json:"instance_id"`
	ReaperPID  int      `json:"reaper_pid"`
	Sessions   []int    `json:"sessions"`
	WorkIDs    []string `json:"work_ids"`
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err != nil || pid <= 1 {
			t.Fatalf("%s holds %q", path, data)
		}
		pids = append(pids, pid)
	}
	return pids
}
