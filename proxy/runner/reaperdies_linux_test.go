package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAReaperThatEndsByItselfIsStartedAgainAMinuteLaterNotAtEveryScript:
// a reaper that ends by itself as soon as it started (as the Go runtime
// aborts it when the host lets it make no thread: the proxy's user at its
// limit of processes) is taken for a start that failed: the proxy says so
// once and tries again a minute later, while the scripts run without one.
// It was started again at every script, each time a process more, and
// each time the runtime's dump of its goroutines and registers, some 120
// lines, in the proxy's log. Here the reaper's binary is a shell script
// that notes each start and exits 2.
func TestAReaperThatEndsByItselfIsStartedAgainAMinuteLaterNotAtEveryScript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	exe := filepath.Join(dir, "reaper")
	// Not os.WriteFile: a test forking beside it would hold the file
	// open for writing, and its start fail, "text file busy".
	if err := writeFileNoFork(exe, []byte("#!/bin/sh\necho started >> '"+starts+"'\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, _, warned := newTestReaper(t)
	r.exe = func() (string, error) { return exe, nil }
	for range 4 {
		run(t, newSpecWith(t, r, "true\n"))
		// The reaper started for it, if any, has ended: the next
		// script's registration finds its pipe closed.
		r.mu.Lock()
		exited := r.exited
		if r.cmd == nil {
			exited = nil
		}
		r.mu.Unlock()
		if exited != nil {
			<-exited
		}
	}
	data, _ := os.ReadFile(starts)
	if n := strings.Count(string(data), "started"); n != 1 {
		t.Errorf("the reaper was started %d times for 4 scripts within a minute; want once", n)
	}
	if w := warned(); len(w) != 1 || !strings.Contains(w[0], "ended by itself (exit status 2)") || !strings.Contains(w[0], "trying again in 1m0s") {
		t.Errorf("warnings %q; want one, saying the reaper ended by itself and when it is tried again", w)
	}
}
