package runner

import "errors"

// Sentinel errors. Run and ResolveScript wrap them with the script name and
// the reason, so callers test with errors.Is and operators read the message.
var (
	// ErrBadScriptName: the name is not a plain file name.
	ErrBadScriptName = errors.New("bad script name")
	// ErrUnknownScript: no such runnable regular file in the scripts directory.
	ErrUnknownScript = errors.New("unknown script")
	// ErrNotAllowed: the script, or the scripts directory, is there, but
	// the proxy's user may not reach or run it (its permissions).
	ErrNotAllowed = errors.New("script the proxy's user may not run")
	// ErrNoExec, with ErrNotAllowed: the script is on a file system
	// mounted noexec (OnNoExec). Its own text is not in the error's
	// message (noExec, on unix).
	ErrNoExec = errors.New("script on a file system mounted noexec")
	// ErrOutsideScripts: the name resolves, through symlinks, outside the
	// scripts directory.
	ErrOutsideScripts = errors.New("script outside the scripts directory")
	// ErrDeadline: the deadline passed; the process tree was killed (or
	// nothing was started).
	ErrDeadline = errors.New("deadline reached")
	// ErrCancelled: the context was cancelled; the process tree was killed (or
	// nothing was started).
	ErrCancelled = errors.New("cancelled")
	// ErrNotStarted, wrapped with ErrDeadline or ErrCancelled: the deadline
	// or the cancel came before the script was started, and nothing of it
	// ran. Its text follows theirs in the error's message.
	ErrNotStarted = errors.New("before it started")
	// ErrKillFailed, wrapped with ErrDeadline or ErrCancelled: killing the
	// script's process tree failed, at least in part (the proxy out of
	// file descriptors could not look for its processes, say), so some of
	// it may still run. The reason follows in the error's message.
	ErrKillFailed = errors.New("killing its process tree")
	// ErrStart: the process could not be started. The OS error is wrapped too.
	ErrStart = errors.New("cannot start script")
	// ErrNoResources, wrapped with ErrStart: the process could not be
	// started for want of something the host hands out and takes back as
	// processes end (file descriptors, processes, memory). Nothing of the
	// script ran, so a start tried again once some are free runs it once.
	// Its own text is not in the error's message, which names what ran
	// out instead.
	ErrNoResources = errors.New("the host is out of a resource a script needs to start")
)

// shortage is an error of a start that failed for want of a resource
// (ErrNoResources): what says which, and err is the OS error.
type shortage struct {
	what string
	err  error
}

func (s *shortage) Error() string        { return s.what + ": " + s.err.Error() }
func (s *shortage) Unwrap() error        { return s.err }
func (s *shortage) Is(target error) bool { return target == ErrNoResources }

// startFailed is the error of a script whose start failed with err: a
// shortage when err says the host was out of a resource (shortOf).
func startFailed(err error) error {
	if what := shortOf(err); what != "" {
		return &shortage{what: what, err: err}
	}
	return err
}
