// Package runner runs one command on the proxy host: a deployed script, its
// arguments, stdin and a few environment variables, bounded by a deadline.
//
// The rules it enforces:
//
//   - Scripts come only from the scripts directory. A script is named by a
//     plain file name: no path separators (neither / nor \, on every OS), no
//     "." or "..", no drive or stream colon, no control characters, no leading
//     "-"; on windows also no device name (CON, NUL.ps1, ...), no trailing
//     dot or space and none of < > " | ? *. The name is resolved through symlinks and refused unless the real
//     file lies inside the real scripts directory, is a regular file and is
//     runnable (executable on unix; .ps1, .cmd, .bat or .exe on windows, by
//     the file's long name: an 8.3 alias such as FOO~1.PS1 for foo.ps1x is
//     refused). The resolved real path is what runs.
//   - Arguments are an argument vector, never a shell line. On unix the script
//     is executed directly (its #! line picks the interpreter). On windows
//     .ps1 runs through powershell.exe -File (the system directory's, as is
//     cmd.exe, never one found on PATH) and .exe directly; a .cmd or .bat
//     can only run through cmd.exe, which re-parses its command line, so each
//     argument is quoted for cmd.exe and arguments that cannot be passed safely
//     (containing ", %, CR, LF or NUL) are refused.
//   - The script sees a minimal environment: PATH and a few OS variables taken
//     from the proxy (never the whole proxy environment, which may hold
//     secrets) plus the command's own variables, which may not set PATH
//     (nor a variable that makes an interpreter run code of its own:
//     internal/scriptenv). It runs in the scripts directory.
//   - The whole process tree is killed, not just the script: on unix the
//     script leads its own session and process group and the group gets
//     SIGKILL (at the deadline or on cancel, so does every process of the
//     session, where /proc lists them: a descendant that made a group of
//     its own, as timeout(1) does, is still in the session); on
//     windows the script is started suspended, put in a job object, then
//     resumed, and the job is terminated. The tree is killed when the deadline
//     passes (Run returns ErrDeadline and no result), when the context is
//     cancelled (ErrCancelled), and also when the script exits normally:
//     background children left behind must not outlive the unit of work,
//     and Run reports at once rather than wait for them to close the
//     output pipes. After a normal exit the session is swept too, where
//     /proc lists it: cheaply, by asking getsid(2) of the pids handed out
//     since the script started, when it ran for under a second; otherwise
//     of every process. Only a process that left the session (setsid, a
//     daemon's double fork) survives: a script that must leave something
//     running hands it to the service manager (systemctl, sc.exe) instead.
//   - The tree is killed too when the proxy itself dies while the script
//     runs (SIGKILL, a crash): on windows the job object dies with the
//     proxy; on unix, given a Spec.Reaper, a reaper process of the proxy's
//     own binary kills it (see ServeReaper and NewReaper). Only a proxy
//     killed between the script's start and its registration with the
//     reaper (microseconds), or while its reaper is dead, leaves it.
//   - Each output stream keeps at most Limits.MaxOutput bytes; the rest is read
//     and discarded so the script never blocks on a full pipe. A process that
//     escaped the tree (setsid, a job breakaway) and holds the output pipes
//     open cannot keep Run waiting more than a short delay after the kill.
//
// Any exit code is a result, not an error; an exit by signal is reported as
// 128+signal on unix, like a shell does.
package runner
