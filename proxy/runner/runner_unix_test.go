//go:build !windows

package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/pidtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// Tests here run real /bin/sh scripts, beside each other: each file a test
// runs is written with writeFileNoFork.

// writeFileNoFork is os.WriteFile with no fork meanwhile. A process forked
// by a test running beside it (every fork takes syscall.ForkLock) would
// inherit the file open for writing until its own exec, and a run of the
// file then would fail with "text file busy" (ETXTBSY).
func writeFileNoFork(path string, data []byte, perm os.FileMode) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	return os.WriteFile(path, data, perm)
}

// writeScript writes an executable /bin/sh script into dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := writeFileNoFork(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// newSpec returns a spec running body as script "s.sh" from a fresh
// scripts directory, with a generous deadline.
func newSpec(t *testing.T, body string) Spec {
	t.Helper()
	dir := t.TempDir()
	writeScript(t, dir, "s.sh", body)
	return Spec{ScriptsDir: dir, Script: "s.sh", Deadline: time.Now().Add(30 * time.Second)}
}

func run(t *testing.T, spec Spec) Result {
	t.Helper()
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// runCancellable runs spec in the background, as the agent does; the
// function it returns cancels the run and fails the test unless Run then
// returns ErrCancelled within 10 s.
func runCancellable(t *testing.T, spec Spec) (cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	errc := make(chan error, 1)
	go func() {
		_, err := Run(ctx, spec)
		errc <- err
	}()
	return func() {
		t.Helper()
		stop()
		select {
		case err := <-errc:
			if !errors.Is(err, ErrCancelled) {
				t.Fatalf("Run = %v, want ErrCancelled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, what string, cond func() bool, timeout time.Duration) {
	t.Helper()
	for end := time.Now().Add(timeout); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readPid waits for a script to write its pid file, then reads it.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 5*time.Second)
	return pid
}

// treeScript starts a background child that stays in the process group and
// records both pids in dir, then sleeps.
const treeScript = `
sleep 60 &
echo $! > "$1/child.pid"
echo $$ > "$1/script.pid"
sleep 60
`

func TestArgsArriveLiterallyWithoutShell(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, `for a in "$@"; do printf '[%s]\n' "$a"; done`)
	spec.Args = []string{"two words", "$(touch x); *", "", "'q'", `"dq"`, "a\nb", "-n"}
	res := run(t, spec)
	want := "[two words]\n[$(touch x); *]\n[]\n['q']\n[\"dq\"]\n[a\nb]\n[-n]\n"
	if string(res.Stdout) != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}
	if _, err := os.Stat(filepath.Join(spec.ScriptsDir, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an argument was run by a shell: file x exists (%v)", err)
	}
}

func TestStdinIsPassed(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "cat\n")
	spec.Stdin = bytes.Repeat([]byte("line of input\n"), 10000) // more than a pipe buffer
	res := run(t, spec)
	if !bytes.Equal(res.Stdout, spec.Stdin) {
		t.Errorf("stdout has %d bytes, want the %d of stdin", len(res.Stdout), len(spec.Stdin))
	}
}

func TestUnreadStdinDoesNotBlock(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "exit 0\n")
	spec.Stdin = make([]byte, 1<<20)
	if res := run(t, spec); res.ExitCode != 0 {
		t.Errorf("exit code %d", res.ExitCode)
	}
}

// TestNoStdinReadsAsEmpty: without Stdin a script reads end of file at once
// (the null device, one shared by every run), also many runs at once.
func TestNoStdinReadsAsEmpty(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "wc -c\n")
	results := make(chan string, 8)
	for range cap(results) {
		go func() {
			res, err := Run(context.Background(), spec)
			results <- strings.TrimSpace(string(res.Stdout)) + " " + fmt.Sprint(err)
		}()
	}
	for range cap(results) {
		if got := waittest.Recv(t, results, "each run of wc -c without stdin to end (with a stdin nobody closes it waits)"); got != "0 <nil>" {
			t.Errorf("wc -c of no stdin: %q, want 0 bytes and no error", got)
		}
	}
}

func TestEnvIsMinimalPlusSpecEnv(t *testing.T) {
	// Not parallel: it sets this process's environment (t.Setenv).
	t.Setenv("SECRET_X", "y")
	spec := newSpec(t, "env\n")
	spec.Env = map[string]string{"PROXY_WORK_ID": "w-42", "PROXY_DEADLINE_SECONDS": "300"}
	out := string(run(t, spec).Stdout)
	for _, want := range []string{"PROXY_WORK_ID=w-42\n", "PROXY_DEADLINE_SECONDS=300\n", "PATH=" + os.Getenv("PATH") + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("environment lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SECRET_X") {
		t.Errorf("the proxy's secret reached the script:\n%s", out)
	}
}

func TestWorkingDirectoryIsScriptsDir(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "pwd -P\n")
	want, err := filepath.EvalSymlinks(spec.ScriptsDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(run(t, spec).Stdout)); got != want {
		t.Errorf("working directory %q, want %q", got, want)
	}
}

func TestNonZeroExitIsAResult(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "echo out; echo err >&2; exit 3\n")
	before := time.Now()
	res := run(t, spec)
	if res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Errorf("got exit %d stdout %q stderr %q; want 3, out, err", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res.StartedAt.Before(before) || res.FinishedAt.Before(res.StartedAt) {
		t.Errorf("times: started %v finished %v, run began %v", res.StartedAt, res.FinishedAt, before)
	}
}

func TestSignalExitIs128PlusSignal(t *testing.T) {
	t.Parallel()
	if res := run(t, newSpec(t, "kill -9 $$\n")); res.ExitCode != 128+9 {
		t.Errorf("exit code %d, want %d", res.ExitCode, 128+9)
	}
}

func TestOutputIsTruncatedWithoutBlockingTheScript(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2; echo done > \"$1\"\n")
	marker := filepath.Join(t.TempDir(), "done")
	spec.Args = []string{marker}
	spec.Limits.MaxOutput = 1024
	res := run(t, spec)
	if len(res.Stdout) != 1024 || !res.StdoutTruncated || len(res.Stderr) != 1024 || !res.StderrTruncated {
		t.Errorf("kept %d/%d bytes, truncated %v/%v; want 1024, true on both",
			len(res.Stdout), len(res.Stderr), res.StdoutTruncated, res.StderrTruncated)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the script did not run to its end: %v", err)
	}
}

func TestDefaultMaxOutputIsOneMiB(t *testing.T) {
	t.Parallel()
	res := run(t, newSpec(t, "head -c 1048577 /dev/zero\n"))
	if len(res.Stdout) != DefaultMaxOutput || !res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("kept %d bytes, truncated %v/%v; want %d, true, false",
			len(res.Stdout), res.StdoutTruncated, res.StderrTruncated, DefaultMaxOutput)
	}
}

func TestOutputAtTheLimitIsNotTruncated(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "printf hello\n")
	spec.Limits.MaxOutput = 5
	if res := run(t, spec); string(res.Stdout) != "hello" || res.StdoutTruncated {
		t.Errorf("stdout %q truncated %v, want hello, false", res.Stdout, res.StdoutTruncated)
	}
}

func TestDeadlineKillsWholeTree(t *testing.T) {
	// Not parallel: it asserts how long Run took, which the load of the
	// other tests could stretch.
	spec := newSpec(t, treeScript)
	pids := t.TempDir()
	spec.Args = []string{pids}
	start := time.Now()
	spec.Deadline = start.Add(500 * time.Millisecond)
	_, err := Run(context.Background(), spec)
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("Run = %v, want ErrDeadline", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Run returned %v after start, long after its 500ms deadline", took)
	}
	assertTreeGone(t, pids)
}

func TestCancelKillsWholeTree(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, treeScript)
	pids := t.TempDir()
	spec.Args = []string{pids}
	cancel := runCancellable(t, spec)
	readPid(t, filepath.Join(pids, "script.pid"))
	cancel()
	assertTreeGone(t, pids)
}

func assertTreeGone(t *testing.T, pidDir string) {
	t.Helper()
	for _, name := range []string{"script.pid", "child.pid"} {
		pid := readPid(t, filepath.Join(pidDir, name))
		waitFor(t, name+" "+strconv.Itoa(pid)+" to be gone", func() bool { return pidtest.Gone(pid) }, 5*time.Second)
	}
}

func TestNormalExitKillsLeftoverGroupMembers(t *testing.T) {
	// Not parallel: it asserts how long Run took, which the load of the
	// other tests could stretch.
	spec := newSpec(t, `sleep 60 & echo $! > "$1/child.pid"; echo bye`)
	pids := t.TempDir()
	spec.Args = []string{pids}
	start := time.Now()
	res := run(t, spec)
	if took := time.Since(start); took >= waitDelay {
		t.Errorf("Run took %v: it waited for the leftover child instead of killing it", took)
	}
	if string(res.Stdout) != "bye\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	pid := readPid(t, filepath.Join(pids, "child.pid"))
	waitFor(t, "leftover child to be gone", func() bool { return pidtest.Gone(pid) }, 5*time.Second)
}

func TestEscapedChildCannotHangRun(t *testing.T) {
	// Not parallel: it sets waitDelay, which every Run reads, and asserts
	// how long Run took.
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid command")
	}
	defer func(d time.Duration) { waitDelay = d }(waitDelay)
	waitDelay = 200 * time.Millisecond
	// The child leaves the process group (setsid), keeps stdout open, and
	// only once it has left does the script exit.
	spec := newSpec(t, `
setsid sh -c 'echo $$ > "$1/child.pid"; exec sleep 60' sh "$1" &
while [ ! -s "$1/child.pid" ]; do sleep 0.01; done
echo bye
`)
	pids := t.TempDir()
	spec.Args = []string{pids}
	start := time.Now()
	res := run(t, spec)
	took := time.Since(start)
	pid := readPid(t, filepath.Join(pids, "child.pid"))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if pidtest.Gone(pid) {
		t.Fatal("the escaped child is gone: the test did not exercise an escape")
	}
	if took > 3*time.Second {
		t.Errorf("Run took %v with an escaped child holding its output", took)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "bye\n" {
		t.Errorf("exit %d stdout %q", res.ExitCode, res.Stdout)
	}
}

func TestPastDeadlineStartsNothing(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, `touch "$1"`)
	marker := filepath.Join(t.TempDir(), "ran")
	spec.Args = []string{marker}
	spec.Deadline = time.Now().Add(-time.Second)
	if _, err := Run(context.Background(), spec); !errors.Is(err, ErrDeadline) {
		t.Fatalf("Run = %v, want ErrDeadline", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the script ran: %v", err)
	}
}

func TestCancelledContextStartsNothing(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, `touch "$1"`)
	marker := filepath.Join(t.TempDir(), "ran")
	spec.Args = []string{marker}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, spec); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Run = %v, want ErrCancelled", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the script ran: %v", err)
	}
}

func TestNoDeadlineRunsToTheEnd(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "echo ok\n")
	spec.Deadline = time.Time{}
	if res := run(t, spec); string(res.Stdout) != "ok\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
}

func TestStartFailureIsErrStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Executable, but no #! line and not a binary: exec refuses it, and no
	// shell steps in to interpret it.
	if err := writeFileNoFork(filepath.Join(dir, "noshebang"), []byte("echo hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "noshebang", Deadline: time.Now().Add(10 * time.Second)})
	if !errors.Is(err, ErrStart) || !errors.Is(err, syscall.ENOEXEC) {
		t.Errorf("Run = %v, want ErrStart wrapping ENOEXEC", err)
	}
}

func TestBadEnvironmentIsErrStart(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "exit 0\n")
	spec.Env = map[string]string{"A=B": "c"}
	if _, err := Run(context.Background(), spec); !errors.Is(err, ErrStart) {
		t.Errorf("Run = %v, want ErrStart", err)
	}
}

func TestRunRefusesBadScriptName(t *testing.T) {
	t.Parallel()
	spec := newSpec(t, "exit 0\n")
	spec.Script = "../s.sh"
	if _, err := Run(context.Background(), spec); !errors.Is(err, ErrBadScriptName) {
		t.Errorf("Run = %v, want ErrBadScriptName", err)
	}
}

func TestResolveScriptFollowsSymlinksOnlyInside(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outside := writeScript(t, t.TempDir(), "evil.sh", "exit 0\n")
	inside := writeScript(t, dir, "real.sh", "exit 0\n")
	if err := os.Mkdir(filepath.Join(dir, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	nested := writeScript(t, filepath.Join(dir, "lib"), "nested.sh", "exit 0\n")
	for link, target := range map[string]string{
		"out.sh":      outside,
		"relout.sh":   "../" + filepath.Base(filepath.Dir(outside)) + "/evil.sh",
		"in.sh":       inside,
		"relin.sh":    "real.sh",
		"nested.sh":   "lib/nested.sh",
		"dangling.sh": filepath.Join(dir, "missing.sh"),
		"etc":         "/etc",
		"loop.sh":     "loop2.sh",
		"loop2.sh":    "loop.sh",
		"chain.sh":    "dangling.sh",
		"abschain.sh": filepath.Join(dir, "dangling.sh"),
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	realInside, _ := filepath.EvalSymlinks(inside)
	realNested, _ := filepath.EvalSymlinks(nested)
	for _, tc := range []struct {
		name    string
		want    string
		wantErr error
		says    string // in the error
	}{
		{"real.sh", realInside, nil, ""},
		{"in.sh", realInside, nil, ""},
		{"relin.sh", realInside, nil, ""},
		{"nested.sh", realNested, nil, ""},
		{"out.sh", "", ErrOutsideScripts, ""},
		{"relout.sh", "", ErrOutsideScripts, ""},
		{"etc", "", ErrOutsideScripts, ""},
		// Named as the link it is, which ls shows (a review: "no such file").
		{"dangling.sh", "", ErrUnknownScript, "it is a symbolic link in scripts directory " + strconv.Quote(dir) + " to " + strconv.Quote(filepath.Join(dir, "missing.sh")) + ", which does not exist"},
		{"loop.sh", "", ErrUnknownScript, "it is a symbolic link that leads to itself"},
		{"chain.sh", "", ErrUnknownScript, "to \"dangling.sh\", a symbolic link that leads to no file"},
		{"abschain.sh", "", ErrUnknownScript, "to " + strconv.Quote(filepath.Join(dir, "dangling.sh")) + ", a symbolic link that leads to no file"},
		{"lib", "", ErrUnknownScript, ""},
	} {
		got, err := ResolveScript(dir, tc.name)
		if !errors.Is(err, tc.wantErr) || got != tc.want {
			t.Errorf("ResolveScript(%q) = %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ResolveScript(%q): %v; want it to say %q", tc.name, err, tc.says)
		}
		if err != nil && !strings.Contains(err.Error(), strconv.Quote(tc.name)) {
			t.Errorf("error %q does not name the script %q", err, tc.name)
		}
	}
}

func TestScriptsDirMayBeASymlink(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	writeScript(t, real, "s.sh", "echo via link\n")
	link := filepath.Join(t.TempDir(), "scripts")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	res := run(t, Spec{ScriptsDir: link, Script: "s.sh", Deadline: time.Now().Add(10 * time.Second)})
	if string(res.Stdout) != "via link\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
}

func TestNotExecutableScriptIsUnknown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := writeFileNoFork(filepath.Join(dir, "plain.sh"), []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ResolveScript(dir, "plain.sh")
	if !errors.Is(err, ErrUnknownScript) || !strings.Contains(err.Error(), `"plain.sh"`) {
		t.Errorf("ResolveScript = %v, want ErrUnknownScript naming the script", err)
	}
}

// TestAScriptThatDoesNotStartIsNotMisnamed: the reasons a script does not
// start are not those of another: a script saved with Windows line endings
// (CRLF) is not said to miss /bin/sh, which is there (its #! line names
// "/bin/sh\r"); one saved with a UTF-8 byte-order mark before its #! line
// is not said to have no #! line; and a program built for another system
// is not said to be no program.
func TestAScriptThatDoesNotStartIsNotMisnamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// An ELF header for a machine no system runs (e_machine 0xabcd).
	elf := append([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xcd\xab"), make([]byte, 128)...)
	for name, body := range map[string][]byte{
		"crlf.sh":  []byte("#!/bin/sh\r\necho hi\r\n"),
		"bom.sh":   []byte("\xef\xbb\xbf#!/bin/sh\necho hi\n"),
		"program":  elf,
		"tool.exe": append([]byte("MZ\x90\x00"), make([]byte, 128)...),
	} {
		if err := writeFileNoFork(filepath.Join(dir, name), body, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{
		"crlf.sh":  `its interpreter "/bin/sh\r" (its #! line) does not exist: the file has Windows line endings (CRLF)`,
		"bom.sh":   "its #! line comes after a byte-order mark",
		"program":  "a program for another system or processor",
		"tool.exe": "a Windows program",
	} {
		_, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: name, Deadline: time.Now().Add(10 * time.Second)})
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), want) {
			t.Errorf("Run %s = %v, want ErrStart saying %q", name, err, want)
		}
	}
}

// TestAMissingInterpreterIsNamed: exec says only "no such file or
// directory" when a script's #! interpreter is missing, which reads as if
// the script were; the failure names the interpreter instead, and says
// when a script has no #! line at all.
func TestAMissingInterpreterIsNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"missing.sh":   "#! /nonexistent/interpreter -e\necho hi\n",
		"noshebang.sh": "echo hi\n",
	} {
		if err := writeFileNoFork(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "missing.sh", Deadline: time.Now().Add(10 * time.Second)})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), `interpreter "/nonexistent/interpreter" (its #! line) does not exist`) {
		t.Errorf("Run with a missing interpreter = %v, want ErrStart naming the interpreter", err)
	}
	_, err = Run(context.Background(), Spec{ScriptsDir: dir, Script: "noshebang.sh", Deadline: time.Now().Add(10 * time.Second)})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "no #! line") {
		t.Errorf("Run without a #! line = %v, want ErrStart saying so", err)
	}
}

// TestAHashBangTheSystemDoesNotSeeIsNamed: a #! line the system does not
// take for one is not "no #! line" (a review): one too long for what the
// system reads of it, one after white space.
func TestAHashBangTheSystemDoesNotSeeIsNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"long.sh":   "#!/" + strings.Repeat("d/", 140) + "sh\necho hi\n",
		"spaced.sh": "  #!/bin/sh\necho hi\n",
	} {
		if err := writeFileNoFork(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for script, want := range map[string]string{
		"long.sh":   "its #! line is longer than the 255 bytes the system reads of it",
		"spaced.sh": "its #! does not begin the file (white space comes before it)",
	} {
		_, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: script, Deadline: time.Now().Add(10 * time.Second)})
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), want) {
			t.Errorf("Run %s = %v, want ErrStart saying %q", script, err, want)
		}
	}
}

// TestAnArgumentLongerThanTheSystemPassesSaysSo: one argument of 200 KiB,
// within the automator's limits on all the arguments, is more than Linux
// passes in one (128 KiB): the start fails saying so, and how to pass
// large data, not only "argument list too long".
func TestAnArgumentLongerThanTheSystemPassesSaysSo(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the limit of one argument is Linux's")
	}
	t.Parallel()
	dir := t.TempDir()
	if err := writeFileNoFork(filepath.Join(dir, "echo.sh"), []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "echo.sh", Args: []string{strings.Repeat("a", 200<<10)}, Deadline: time.Now().Add(10 * time.Second)})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "more than this system passes to a program") || !strings.Contains(err.Error(), "pass large data on stdin") {
		t.Errorf("Run with a 200 KiB argument = %v, want ErrStart saying what the system passes", err)
	}
}

// TestAScriptGetsHOMEAndUSEREvenWhenTheProxyHasNone: a proxy started by a
// service manager that sets neither (systemd without User=) still gives
// its scripts HOME and USER, its user's, which git, ssh and ~ need (a
// review: git said "$HOME not set" once the proxy was installed).
func TestAScriptGetsHOMEAndUSEREvenWhenTheProxyHasNone(t *testing.T) {
	// Not parallel: it unsets the process's HOME and USER.
	u, err := user.Current()
	if err != nil || u.HomeDir == "" || u.Username == "" {
		t.Skipf("this user has no entry with a home and a name: %v", err)
	}
	t.Setenv("HOME", "") // restored at the end
	t.Setenv("USER", "")
	os.Unsetenv("HOME")
	os.Unsetenv("USER")
	res := run(t, newSpec(t, `echo "${HOME-unset}:${USER-unset}"`+"\n"))
	if got, want := string(res.Stdout), u.HomeDir+":"+u.Username+"\n"; got != want {
		t.Errorf("the script saw HOME:USER %q, want %q (its user's)", got, want)
	}
	// One the proxy has wins.
	t.Setenv("HOME", "/proxy/home")
	res = run(t, newSpec(t, `echo "$HOME"`+"\n"))
	if got := string(res.Stdout); got != "/proxy/home\n" {
		t.Errorf("with the proxy's HOME set, the script saw %q, want /proxy/home", got)
	}
}
