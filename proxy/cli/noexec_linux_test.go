package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/internal/disktest"
)

// TestAScriptTheSystemWillNotRunForANoexecMountIsSaid: a script on a file
// system mounted noexec, or one whose #! interpreter is there, is named at
// start, at WARN, and by status (unrunnable), though its modes allow
// it: the system refuses to run it ("permission denied"), so a unit
// naming it fails on this instance, and a standby that would fail them
// all looked healthy (a review). A script and interpreter elsewhere are
// not named, nor a file there that is no script (no x bit: a re-review).
func TestAScriptTheSystemWillNotRunForANoexecMountIsSaid(t *testing.T) {
	t.Parallel()
	noexec := disktest.NoExec(t)
	write := func(path, body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(noexec, "there.sh"), "#!/bin/sh\necho ok\n")
	write(filepath.Join(noexec, "interp"), "#!/bin/sh\nexec /bin/sh \"$@\"\n")
	// Not a script: no one may run it, on any file system.
	if err := os.WriteFile(filepath.Join(noexec, "README.txt"), []byte("notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The premise: the system refuses it, though its mode allows it.
	if err := exec.Command(filepath.Join(noexec, "there.sh")).Run(); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("running a script on the noexec mount: %v, want permission denied", err)
	}
	want := []string{"interp (" + filepath.Join(noexec, "interp") + ")", "there.sh (" + filepath.Join(noexec, "there.sh") + ")"}
	if got := unrunnable(noexec, false); len(got) != 1 || got[0].warning != noExecWarning || !slices.Equal(got[0].scripts, want) {
		t.Errorf("unrunnable, of the noexec mount = %q, want %q under noExecWarning alone", got, want)
	}

	scripts := t.TempDir()
	write(filepath.Join(scripts, "ok.sh"), "#!/bin/sh\necho ok\n")
	_, run := startStopped(t, scripts)
	if log := run(); strings.Contains(log, "noexec") {
		t.Errorf("scripts the system runs: the log warns of them:\n%s", log)
	}
	write(filepath.Join(scripts, "via.sh"), "#!"+filepath.Join(noexec, "interp")+"\necho ok\n")
	log := run()
	if !strings.Contains(log, `level=WARN msg="scripts the system will not run, on a file system mounted noexec`) ||
		!strings.Contains(log, "via.sh (#!"+filepath.Join(noexec, "interp")+")") || strings.Contains(log, "ok.sh (") {
		t.Errorf("a script whose interpreter is on a noexec mount: want a WARN naming it alone:\n%s", log)
	}
}
