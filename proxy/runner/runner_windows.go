//go:build windows

package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// baseEnvKeys are the proxy's variables a script inherits, when set. Beyond
// the system ones, the folders PowerShell needs to find its modules, those
// COM servers and installers are registered under (%CommonProgramFiles%,
// the 32-bit ones), and the machine's and user's names and processor,
// which scripts and installers read: none holds a secret.
var baseEnvKeys = []string{
	"PATH", "PATHEXT", "SystemRoot", "SystemDrive", "WINDIR", "ComSpec",
	"TEMP", "TMP", "USERPROFILE", "ProgramFiles", "ProgramData", "LOCALAPPDATA", "APPDATA",
	"ProgramFiles(x86)", "ProgramW6432", "CommonProgramFiles", "CommonProgramFiles(x86)", "CommonProgramW6432",
	"ALLUSERSPROFILE", "PUBLIC", "OS", "PROCESSOR_ARCHITECTURE", "NUMBER_OF_PROCESSORS",
	"COMPUTERNAME", "USERNAME", "USERDOMAIN",
}

// userEnv gives nothing on windows: the service's environment has the
// user's folders and names.
func userEnv() map[string]string { return nil }

// commandFor runs .ps1 through PowerShell, .cmd and .bat through cmd.exe with
// a command line quoted for it, and .exe directly. The interpreters are the
// ones of the system directory, not whatever PATH finds first.
func commandFor(path string, args []string) (*exec.Cmd, error) {
	argv, cmdLine, err := windowsCommand(path, args)
	if err != nil {
		return nil, err
	}
	sysDir, err := windows.GetSystemDirectory()
	if err != nil {
		return nil, fmt.Errorf("%w %q: finding the system directory: %w", ErrStart, baseName(path), err)
	}
	// An .exe script's argv[0] is its absolute path, which stays.
	argv[0] = systemInterpreter(sysDir, argv[0])
	cmd := exec.Command(argv[0], argv[1:]...)
	if cmdLine != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{CmdLine: cmdLine}
	}
	return cmd, nil
}

// configureCmd starts the script suspended: afterStart puts it in a job
// object before it runs, so nothing it starts can be outside the job.
func configureCmd(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= windows.CREATE_SUSPENDED | windows.CREATE_NEW_PROCESS_GROUP
}

// processTree is the job object holding the script and its descendants.
type processTree struct{ job windows.Handle }

// afterStart creates a job that kills its processes when closed, assigns the
// suspended script to it, then lets the script run. Until the script's
// thread is resumed nothing of it ran: a step that failed for want of
// handles, memory or quota before then is a shortage (ErrNoResources), and
// the start may be tried again.
func afterStart(cmd *exec.Cmd) (*processTree, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, startFailed(fmt.Errorf("creating job object: %w", err))
	}
	t := &processTree{job: job}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{
			LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
		},
	}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		t.release()
		return nil, startFailed(fmt.Errorf("setting job object limits: %w", err))
	}
	pid := uint32(cmd.Process.Pid)
	// os.Process holds a handle, so the pid still names our child.
	proc, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, pid)
	if err != nil {
		t.release()
		return nil, startFailed(fmt.Errorf("opening process %d: %w", pid, err))
	}
	defer windows.CloseHandle(proc)
	if err := windows.AssignProcessToJobObject(job, proc); err != nil {
		t.release()
		return nil, startFailed(fmt.Errorf("assigning process %d to its job object: %w", pid, err))
	}
	if err := resumeProcess(pid); err != nil {
		t.release()
		return nil, fmt.Errorf("resuming process %d: %w", pid, err)
	}
	return t, nil
}

// resumeProcess resumes the threads of the suspended process pid. os/exec
// closes the main thread's handle, so the thread is found by a snapshot.
func resumeProcess(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return startFailed(err)
	}
	defer windows.CloseHandle(snap)
	entry := windows.ThreadEntry32{Size: uint32(unsafe.Sizeof(windows.ThreadEntry32{}))}
	resumed := 0
	for err = windows.Thread32First(snap, &entry); err == nil; err = windows.Thread32Next(snap, &entry) {
		if entry.OwnerProcessID != pid {
			continue
		}
		th, err := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, entry.ThreadID)
		if err != nil {
			err = fmt.Errorf("opening thread %d: %w", entry.ThreadID, err)
			if resumed == 0 {
				err = startFailed(err)
			}
			return err
		}
		_, err = windows.ResumeThread(th)
		windows.CloseHandle(th)
		if err != nil {
			return fmt.Errorf("resuming thread %d: %w", entry.ThreadID, err)
		}
		resumed++
	}
	if !errors.Is(err, windows.ERROR_NO_MORE_FILES) {
		return err
	}
	if resumed == 0 {
		return errors.New("no thread found")
	}
	return nil
}

// kill terminates every process in the job.
func (t *processTree) kill() error {
	if err := windows.TerminateJobObject(t.job, 1); err != nil {
		return fmt.Errorf("terminating job object: %w", err)
	}
	return nil
}

// killRest has nothing to do: the job holds the whole tree.
func (t *processTree) killRest() error { return nil }

// killDescendants has nothing to do: the Job Object holds every descendant
// of the script, and kill terminates it.
func (t *processTree) killDescendants() error { return nil }

// killLeftovers has nothing to do either: kill ended the whole job.
func (t *processTree) killLeftovers(time.Duration) error { return nil }

// release closes the job; thanks to KILL_ON_JOB_CLOSE that also kills
// anything still in it.
func (t *processTree) release() {
	windows.CloseHandle(t.job)
}

func exitCode(state *os.ProcessState) int {
	return state.ExitCode()
}

// checkRunnable refuses a file windows cannot run as a script. The file is
// judged by its own (long) name too: the name asked for may be its 8.3 alias,
// which ends in the first three letters of its extension (FOO~1.PS1 names
// foo.ps1x, RUN~1.EXE names run.exe_old), and would run a file that is not a
// script.
func checkRunnable(name, path string) error {
	if _, err := interpreterFor(path); err != nil {
		return err
	}
	long, err := longPathName(path)
	if err != nil {
		return fmt.Errorf("%w %q: finding its long name: %w", ErrUnknownScript, name, err)
	}
	if _, err := interpreterFor(long); err != nil {
		return fmt.Errorf("%w %q: it is another name of %q, which is not a script (on windows a script ends in .ps1, .cmd, .bat or .exe)",
			ErrUnknownScript, name, baseName(long))
	}
	return nil
}

// longPathName is path with each 8.3 alias replaced by the long name
// (GetLongPathNameW; a path without alias comes back as it is).
func longPathName(path string) (string, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return "", err
	}
	buf := make([]uint16, windows.MAX_PATH)
	for {
		n, err := windows.GetLongPathName(p, &buf[0], uint32(len(buf)))
		if err != nil {
			return "", err
		}
		if n < uint32(len(buf)) {
			// The length without the NUL when it fit; the size needed,
			// NUL included (so larger than the buffer), when it did not.
			return windows.UTF16ToString(buf[:n]), nil
		}
		buf = make([]uint16, n)
	}
}

// startHint has nothing to add on windows: the script's interpreter is
// the proxy's choice (interpreterFor), and its errors say what they mean.
func startHint(string, error) string { return "" }

// shortOf says which resource of the host a failed start (making its
// pipes, CreateProcess) lacked, or "" when err is no shortage.
func shortOf(err error) string {
	switch {
	case errors.Is(err, windows.ERROR_TOO_MANY_OPEN_FILES):
		return "the proxy has as many handles open as it may"
	case errors.Is(err, windows.ERROR_NOT_ENOUGH_MEMORY), errors.Is(err, windows.ERROR_OUTOFMEMORY),
		errors.Is(err, windows.ERROR_COMMITMENT_LIMIT), errors.Is(err, windows.ERROR_NO_SYSTEM_RESOURCES),
		errors.Is(err, windows.ERROR_NOT_ENOUGH_QUOTA):
		return "the host is out of memory or system resources, or the proxy's account out of its quota"
	}
	return ""
}

// Interpreter returns "": on windows a script's extension chooses its
// interpreter, one of the system directory's.
func Interpreter(string) string { return "" }

// ShebangLine returns "": on windows no #! line is read.
func ShebangLine(string) string { return "" }
