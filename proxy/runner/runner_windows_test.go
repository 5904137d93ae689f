//go:build windows

package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"
)

// These run on Windows only (make windows compiles them everywhere): the
// interpreter chosen by extension, and the Job Object that holds and kills
// a script's whole process tree.

func writeWinScript(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func requirePowerShell(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("powershell.exe"); err != nil {
		t.Skipf("powershell.exe is not on PATH: %v", err)
	}
}

// exited reports whether the process pid has ended within d (or no longer
// exists).
func exited(pid int, d time.Duration) bool {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return true
	}
	defer windows.CloseHandle(h)
	ev, err := windows.WaitForSingleObject(h, uint32(d.Milliseconds()))
	return err == nil && ev == windows.WAIT_OBJECT_0
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	ok := false
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(data), "\ufeff"))); err == nil && pid > 0 {
			ok = true
			break
		}
	}
	if !ok {
		t.Fatalf("no pid in %s", path)
	}
	return pid
}

// The script reads its argument as docs/install-proxy.md says, in quotes
// ("%~1"), and echoes it by delayed expansion, which comes after cmd.exe
// looked for & (an unquoted echo [%~1] would run "b c]").
func TestBatchScriptRunsThroughCmdWithLiteralArguments(t *testing.T) {
	dir := t.TempDir()
	writeWinScript(t, dir, "s.cmd", "@echo off\r\nset \"a=%~1\"\r\nsetlocal EnableDelayedExpansion\r\necho [!a!]\r\nexit /b 3\r\n")
	res, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "s.cmd", Args: []string{"a&b c"}, Deadline: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || strings.TrimSpace(string(res.Stdout)) != "[a&b c]" {
		t.Fatalf("exit %d, stdout %q; want 3, [a&b c]", res.ExitCode, res.Stdout)
	}
}

func TestPowerShellScriptRunsWithArguments(t *testing.T) {
	requirePowerShell(t)
	dir := t.TempDir()
	writeWinScript(t, dir, "s.ps1", "Write-Output \"hi $($args[0])\"\r\nexit 4\r\n")
	res, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "s.ps1", Args: []string{"x y"}, Deadline: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 4 || strings.TrimSpace(string(res.Stdout)) != "hi x y" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 4, hi x y", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestScriptWithoutAWindowsExtensionIsRefused(t *testing.T) {
	dir := t.TempDir()
	writeWinScript(t, dir, "s.sh", "echo no\n")
	if _, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "s.sh"}); !errors.Is(err, ErrUnknownScript) {
		t.Fatalf("Run: %v, want ErrUnknownScript", err)
	}
}

// treePS1 starts a long-lived child outside PowerShell's own lifetime and
// writes its pid to $args[0], then waits.
const treePS1 = "$p = Start-Process -FilePath ping.exe -ArgumentList '-n','120','127.0.0.1' -NoNewWindow -PassThru\r\n" +
	"Set-Content -Path $args[0] -Value $p.Id\r\n" +
	"if ($args[1] -ne 'exit') { Start-Sleep -Seconds 120 }\r\n"

// TestDeadlineKillsTheWholeJob: at the deadline the script and the child it
// started are both gone: the Job Object kills the tree.
func TestDeadlineKillsTheWholeJob(t *testing.T) {
	requirePowerShell(t)
	dir := t.TempDir()
	writeWinScript(t, dir, "tree.ps1", treePS1)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	_, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "tree.ps1", Args: []string{pidFile, "wait"}, Deadline: time.Now().Add(10 * time.Second)})
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("Run: %v, want ErrDeadline", err)
	}
	if pid := readPID(t, pidFile); !exited(pid, 10*time.Second) {
		t.Fatalf("the script's child %d outlived the deadline", pid)
	}
}

// TestCancelKillsTheWholeJob: a cancelled unit's tree is killed too.
func TestCancelKillsTheWholeJob(t *testing.T) {
	requirePowerShell(t)
	dir := t.TempDir()
	writeWinScript(t, dir, "tree.ps1", treePS1)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Spec{ScriptsDir: dir, Script: "tree.ps1", Args: []string{pidFile, "wait"}, Deadline: time.Now().Add(time.Minute)})
		errc <- err
	}()
	pid := readPID(t, pidFile)
	cancel()
	if err := <-errc; !errors.Is(err, ErrCancelled) {
		t.Fatalf("Run: %v, want ErrCancelled", err)
	}
	if !exited(pid, 10*time.Second) {
		t.Fatalf("the script's child %d outlived the cancel", pid)
	}
}

// TestNormalExitKillsLeftovers: what a script leaves running does not
// outlive its unit.
func TestNormalExitKillsLeftovers(t *testing.T) {
	requirePowerShell(t)
	dir := t.TempDir()
	writeWinScript(t, dir, "tree.ps1", treePS1)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	res, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "tree.ps1", Args: []string{pidFile, "exit"}, Deadline: time.Now().Add(time.Minute)})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %+v, %v", res, err)
	}
	if pid := readPID(t, pidFile); !exited(pid, 10*time.Second) {
		t.Fatalf("the script's child %d outlived the script", pid)
	}
}

// TestShortNameOfAFileThatIsNotAScriptIsRefused: the 8.3 alias of
// tool.ps1x ends in .PS1, but the file it names is not a script.
func TestShortNameOfAFileThatIsNotAScriptIsRefused(t *testing.T) {
	dir := t.TempDir()
	writeWinScript(t, dir, "disabled-tool.ps1x", "Write-Output ran\r\n")
	long, err := windows.UTF16PtrFromString(filepath.Join(dir, "disabled-tool.ps1x"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]uint16, windows.MAX_PATH)
	n, err := windows.GetShortPathName(long, &buf[0], uint32(len(buf)))
	if err != nil {
		t.Fatal(err)
	}
	short := filepath.Base(windows.UTF16ToString(buf[:n]))
	if !strings.EqualFold(filepath.Ext(short), ".ps1") {
		t.Skipf("no 8.3 alias on this volume (short name %q)", short)
	}
	_, err = Run(context.Background(), Spec{ScriptsDir: dir, Script: short, Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, ErrUnknownScript) || !strings.Contains(err.Error(), "disabled-tool.ps1x") {
		t.Fatalf("Run(%q): %v, want ErrUnknownScript naming disabled-tool.ps1x", short, err)
	}
}

// TestPowerShellScriptWithBracketsIsRefusedNotAnotherRun: powershell.exe
// -File would take x[1].ps1 for a pattern and run x1.ps1; the proxy
// refuses x[1].ps1 instead, and x1.ps1 does not run.
func TestPowerShellScriptWithBracketsIsRefusedNotAnotherRun(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	writeWinScript(t, dir, "x[1].ps1", "Write-Output bracket\r\n")
	writeWinScript(t, dir, "x1.ps1", "Set-Content -Path $args[0] -Value ran\r\n")
	_, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "x[1].ps1", Args: []string{marker}, Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "wildcard") {
		t.Fatalf("Run(x[1].ps1): %v, want ErrStart saying why", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("x1.ps1 ran for x[1].ps1")
	}
}

// TestScriptGetsTheSystemsFoldersAndNamesButNotTheProxysOtherVariables:
// a script sees the proxy's PROCESSOR_ARCHITECTURE and CommonProgramFiles
// (which scripts, installers and COM servers read), and none of the
// proxy's other variables, which may hold secrets.
func TestScriptGetsTheSystemsFoldersAndNamesButNotTheProxysOtherVariables(t *testing.T) {
	t.Setenv("OPSGATE_TEST_SECRET", "s3cret")
	dir := t.TempDir()
	writeWinScript(t, dir, "env.cmd", "@echo off\r\necho [%PROCESSOR_ARCHITECTURE%][%CommonProgramFiles%][%OPSGATE_TEST_SECRET%]\r\n")
	res, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "env.cmd", Deadline: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	// In a batch file, a variable that is not set expands to nothing.
	want := "[" + os.Getenv("PROCESSOR_ARCHITECTURE") + "][" + os.Getenv("CommonProgramFiles") + "][]"
	if got := strings.TrimSpace(string(res.Stdout)); got != want {
		t.Errorf("the script's variables: %q, want %q", got, want)
	}
}

// TestAStartStepShortOfHandlesMemoryOrQuotaIsAShortage: a step of the
// start that fails for want of handles, memory or quota (the job object's,
// before the suspended script is resumed: nothing of it ran) is
// ErrNoResources, so the proxy starts the script again; another failure is
// not. (These machines cannot exhaust a Windows quota; this checks the
// classification afterStart's steps go through.)
func TestAStartStepShortOfHandlesMemoryOrQuotaIsAShortage(t *testing.T) {
	t.Parallel()
	for _, e := range []error{windows.ERROR_NOT_ENOUGH_QUOTA, windows.ERROR_TOO_MANY_OPEN_FILES, windows.ERROR_NO_SYSTEM_RESOURCES, windows.ERROR_NOT_ENOUGH_MEMORY} {
		if err := startFailed(fmt.Errorf("creating job object: %w", e)); !errors.Is(err, ErrNoResources) || !errors.Is(err, e) {
			t.Errorf("a job object not made for %v gave %v; want a shortage wrapping it", e, err)
		}
	}
	if err := startFailed(fmt.Errorf("assigning process 1 to its job object: %w", windows.ERROR_ACCESS_DENIED)); errors.Is(err, ErrNoResources) {
		t.Errorf("access denied gave a shortage: %v", err)
	}
}
