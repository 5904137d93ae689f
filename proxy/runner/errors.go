package runner

import "errors"

// Sentinel errors. Run and ResolveScript wrap them with the script name and
// the reason, so callers test with errors.Is and operators read the message.
var (
	// ErrBadScriptName: the name is not a plain file name.
	ErrBadScriptName = errors.New("bad script name")
	// ErrUnknownScript: no such runnable regular file in the scripts directory.
	ErrUnknownScript = errors.New("unknown script")
	// ErrOutsideScripts: the name resolves, through symlinks, outside the
	// scripts directory.
	ErrOutsideScripts = errors.New("script outside the scripts directory")
	// ErrDeadline: the deadline passed; the process tree was killed (or
	// nothing was started).
	ErrDeadline = errors.New("deadline reached")
	// ErrCancelled: the context was cancelled; the process tree was killed (or
	// nothing was started).
	ErrCancelled = errors.New("cancelled")
	// ErrStart: the process could not be started. The OS error is wrapped too.
	ErrStart = errors.New("cannot start script")
)
