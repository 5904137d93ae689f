//go:build !windows

package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// baseEnvKeys are the proxy's variables a script inherits, when set
// (HOME and USER from userEnv when not).
var baseEnvKeys = []string{"PATH", "HOME", "USER", "LANG", "TMPDIR"}

// userEnv holds what a script gets for HOME and USER when the proxy's
// environment has neither, from the proxy's user's entry in the user
// database (nothing when it has none): a service manager may set neither
// (systemd sets them only for a unit with User=, which `proxy install`
// without --user does not write), and scripts expect them (git, ssh, ~).
var userEnv = sync.OnceValue(func() map[string]string {
	u, err := user.Current()
	if err != nil {
		return nil
	}
	env := map[string]string{}
	if u.HomeDir != "" {
		env["HOME"] = u.HomeDir
	}
	if u.Username != "" {
		env["USER"] = u.Username
	}
	return env
})

// commandFor executes the script directly: its #! line picks the
// interpreter, and args reach it as an argument vector.
func commandFor(path string, args []string) (*exec.Cmd, error) {
	return exec.Command(path, args...), nil
}

// configureCmd makes the script lead a new session, and so a new process
// group: the script and every descendant that stays in the group can be
// killed as one, and a descendant that leaves the group without leaving the
// session (timeout(1), a job of a shell with job control) is still found by
// its session (killSession).
func configureCmd(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
}

// processTree is the script's session, whose id is also its process
// group's.
type processTree struct{ pgid int }

// afterStart returns the started script's tree. The group already exists:
// the child joined it before exec, so before it could start anything.
func afterStart(cmd *exec.Cmd) (*processTree, error) {
	return &processTree{pgid: cmd.Process.Pid}, nil
}

// kill sends SIGKILL to the whole group. An empty group is not an error. The
// group id cannot be reused by another group while a member is alive, so
// this is safe even after the script itself was reaped.
func (t *processTree) kill() error {
	err := syscall.Kill(-t.pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("killing process group %d: %w", t.pgid, err)
	}
	return nil
}

// killDescendants kills, before kill, what of the script's tree left its
// session (setsid) while it was the script's: found only through its
// parents, which kill ends.
func (t *processTree) killDescendants() error {
	return killDescendants(t.pgid)
}

// killRest sends SIGKILL to what kill leaves of the script's tree: the
// processes of its session outside its group (where the OS lists them). It
// looks at every process, as a deadline or a cancel may come at any time.
// The session id, like the group id, cannot be reused while a member is
// alive.
func (t *processTree) killRest() error {
	return killSession(t.pgid)
}

// killLeftovers is killRest after the script exited normally, having run
// for ran: it looks at the processes started since the script only, when
// it ran briefly (killSessionAfterExit), so that a tiny script does not pay
// for a look at every process of the host.
func (t *processTree) killLeftovers(ran time.Duration) error {
	return killSessionAfterExit(t.pgid, ran)
}

func (t *processTree) release() {}

// exitCode reports an exit by signal as 128+signal, like a shell.
func exitCode(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

// noExec is the error of a script on a file system mounted noexec
// (ErrNoExec and ErrNotAllowed), err the OS's. Its message says so first,
// so that a table's reason cut short still does (a review: "script the
// proxy's user may not run" came first, and `work list` cut the rest).
type noExec struct {
	name string
	err  error
}

func (e *noExec) Error() string {
	return fmt.Sprintf("script %q is on a file system mounted noexec, from which the system runs no program, whatever its mode: mount it without noexec, or keep the scripts on another file system: %v", e.name, e.err)
}
func (e *noExec) Unwrap() error { return e.err }
func (e *noExec) Is(target error) bool {
	return target == ErrNoExec || target == ErrNotAllowed
}

// checkRunnable refuses a script the proxy may not execute.
func checkRunnable(name, path string) error {
	err := unix.Access(path, unix.X_OK)
	if err == nil {
		return nil
	}
	if fi, serr := os.Stat(path); serr == nil && fi.Mode().Perm()&0o111 != 0 {
		if OnNoExec(path) {
			// Not its mode, nor its owner (a review: "executable,
			// but not by root"). A file no one may run is not a
			// script: said as below (a re-review: a README was
			// listed).
			return &noExec{name: name, err: err}
		}
		// Executable, but not by this user (its owner's alone, say).
		owner := ""
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = fmt.Sprintf(", owner uid %d", st.Uid)
			if u, err := user.LookupId(fmt.Sprint(st.Uid)); err == nil {
				owner = ", owner " + u.Username
			}
		}
		return fmt.Errorf("%w %q: it is executable (mode %v%s), but not by %s: give that user execute access, and read access to a script: %w", ErrNotAllowed, name, fi.Mode().Perm(), owner, proxyUser(), err)
	}
	return fmt.Errorf("%w %q: not executable (chmod +x it): %w", ErrUnknownScript, name, err)
}

// startHint says what an error starting the script at path means, where
// exec's words mislead: the script resolved, so ENOENT means its #!
// interpreter is missing (exec says "no such file or directory", as if the
// script were), ENOEXEC that it has no #! line, or one the system does not
// see (after a byte-order mark), or that it is a program for another
// system. It ends in ": ", or is "".
func startHint(path string, err error) string {
	switch {
	case errors.Is(err, syscall.ENOENT):
		if interp := shebang(path); strings.HasSuffix(interp, "\r") {
			// Saved on Windows: the interpreter the system looks for is
			// "/bin/sh\r", which is not there, though /bin/sh is.
			return fmt.Sprintf("its interpreter %q (its #! line) does not exist: the file has Windows line endings (CRLF); convert them to LF (dos2unix): ", interp)
		} else if interp != "" {
			return fmt.Sprintf("its interpreter %q (its #! line) does not exist: ", interp)
		}
	case errors.Is(err, syscall.ENOEXEC):
		head := fileHead(path)
		switch {
		case bytes.HasPrefix(head, []byte("\xef\xbb\xbf#!")):
			return "its #! line comes after a byte-order mark, which hides it from the system: save the file without one: "
		case bytes.HasPrefix(head, []byte("\x7fELF")):
			return "it is a program for another system or processor: "
		case bytes.HasPrefix(head, []byte("MZ")):
			return "it is a Windows program: "
		case bytes.HasPrefix(head, []byte("#!")) && len(head) == shebangMax && bytes.IndexByte(head, '\n') < 0:
			return fmt.Sprintf("its #! line is longer than the %d bytes the system reads of it: name a shorter path to the interpreter (a link to it): ", shebangMax-1)
		case bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte("#!")):
			return "its #! does not begin the file (white space comes before it), so the system sees no #! line: remove what comes before it: "
		}
		return "it is not a program and has no #! line: "
	case errors.Is(err, syscall.EACCES):
		if interp := shebang(path); filepath.IsAbs(interp) && OnNoExec(interp) {
			return fmt.Sprintf("its #! interpreter %q is on a file system mounted noexec, from which the system runs no program: ", interp)
		}
		return "its #! interpreter is not executable, or its file system is mounted noexec: "
	case errors.Is(err, syscall.E2BIG):
		return "its arguments and environment are more than this system passes to a program (on Linux at most 128 KiB in one argument): pass large data on stdin: "
	}
	return ""
}

// shebangMax is as much of a file as Linux reads to find its #! line
// (BINPRM_BUF_SIZE): an interpreter's path must end within it.
const shebangMax = 256

// fileHead returns the first bytes of the file at path (at most
// shebangMax), or none.
func fileHead(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, shebangMax)
	n, _ := io.ReadFull(f, buf)
	return buf[:n]
}

// Interpreter returns the program the #! line of the script at path names,
// as the system reads it, or "" when it has none (or is not readable).
func Interpreter(path string) string { return shebang(path) }

// ShebangLine returns the #! line of the script at path after the "#!",
// up to its newline (a carriage return before it kept), or "" when it has
// none (or is not readable).
func ShebangLine(path string) string {
	line, ok := bytes.CutPrefix(fileHead(path), []byte("#!"))
	if !ok {
		return ""
	}
	line, _, _ = bytes.Cut(line, []byte("\n"))
	return string(line)
}

// shebang returns the interpreter a script's #! line names, as the system
// reads it (InterpreterIn), or "".
func shebang(path string) string { return InterpreterIn(ShebangLine(path)) }

// shortOf says which resource of the host a failed start (making its
// pipes, fork, exec) lacked, or "" when err is no shortage. The words
// name the limit to raise: the OS's alone ("too many open files",
// "resource temporarily unavailable") do not say which, or that the
// script did not run.
func shortOf(err error) string {
	switch {
	case errors.Is(err, syscall.EMFILE):
		return "the proxy has as many files open as its limit allows (ulimit -n; LimitNOFILE= of its systemd unit)"
	case errors.Is(err, syscall.ENFILE):
		return "the host has as many files open as it allows (sysctl fs.file-max)"
	case errors.Is(err, syscall.EAGAIN):
		return "the proxy's user or service runs as many processes as its limit allows (ulimit -u; TasksMax= of its systemd unit; pids.max of its cgroup)"
	case errors.Is(err, syscall.ENOMEM):
		return "the host is out of memory"
	}
	return ""
}
