//go:build linux

package pid1_test

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/internal/pid1"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestMain runs the test binary as a program that calls pid1.Run first, as
// the proxy's main does, when asked to (helperEnv): as PID 1 of a PID
// namespace it runs itself again under it and exits with what Run
// returns; as that child (not PID 1) it dies from SIGABRT.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "abort" {
		if code, ok := pid1.Run(); ok {
			os.Exit(code)
		}
		// A shell in its place, not the Go runtime, whose own SIGABRT
		// handler would print every goroutine first: the same pid dies
		// from the signal, with its default action.
		err := syscall.Exec("/bin/sh", []string{"sh", "-c", "kill -ABRT $$"}, os.Environ())
		os.Stderr.WriteString("exec /bin/sh: " + err.Error() + "\n")
		os.Exit(2)
	}
	os.Exit(m.Run())
}

const helperEnv = "PID1_TEST_HELPER"

// TestAProgramKilledByASignalMakesPID1ExitWith128PlusIt: a program run as
// its container's first process dies from a signal (SIGABRT, 6); the PID 1
// that runs it exits with 128+6 = 134, as a shell reports it and a
// container runtime expects, not with the -1 (255) of a wait status that
// holds no exit code. A real PID namespace (unshare).
func TestAProgramKilledByASignalMakesPID1ExitWith128PlusIt(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare")
	}
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := waittest.Context(t, "the program under PID 1 to end")
	cmd := exec.CommandContext(ctx, unshare, "--fork", "--pid", "--mount-proc", exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), helperEnv+"=abort")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("unshare running PID 1: %v, want it to exit with a code:\n%s", err, out)
	}
	if code := exit.ExitCode(); code != 128+int(syscall.SIGABRT) {
		t.Errorf("PID 1 whose program died from SIGABRT exited with %d (%v), want %d:\n%s", code, exit, 128+int(syscall.SIGABRT), out)
	}
}
