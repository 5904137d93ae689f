//go:build !windows

package pidtest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/opsgate/opsgate/internal/waittest"
)

// TestGoneOnlyOnceAProcessHasEnded: a running process is not gone; once it
// has exited, whether reaped or a zombie not yet waited for, it is.
func TestGoneOnlyOnceAProcessHasEnded(t *testing.T) {
	if Gone(os.Getpid()) {
		t.Fatal("Gone(this process) = true")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	pid := cmd.Process.Pid
	if Gone(pid) {
		t.Fatal("Gone of a running child = true")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		// Not waited for yet: a zombie, where /proc shows it.
		waittest.Until(t, "the killed child, not yet waited for, to be gone", func() bool { return Gone(pid) })
	}
	_ = cmd.Wait()
	if !Gone(pid) {
		t.Fatal("Gone of a reaped child = false")
	}
}
