package runner

import "time"

// DefaultMaxOutput is the number of bytes kept per output stream when
// Limits.MaxOutput is not set.
const DefaultMaxOutput = 1 << 20

// waitDelay bounds how long Run waits, once the script has exited and its
// process tree has been killed, for the output pipes to close. Only a process
// that escaped the tree can hold them open longer; its output is then cut
// off (a pipe nobody holds is not: its copy ends as soon as it runs). A
// variable so tests can shorten it.
var waitDelay = 2 * time.Second

// Limits bound what a command may produce.
type Limits struct {
	// MaxOutput is the number of bytes kept per stream (stdout, stderr); the
	// rest is read and discarded, and the stream's *Truncated flag set.
	// DefaultMaxOutput when zero or negative.
	MaxOutput int
}

func (l Limits) maxOutput() int {
	if l.MaxOutput <= 0 {
		return DefaultMaxOutput
	}
	return l.MaxOutput
}

// Spec is one command to run.
type Spec struct {
	// ScriptsDir is the only directory scripts may come from. It is also the
	// script's working directory.
	ScriptsDir string
	// Script is a plain file name inside ScriptsDir.
	Script string
	// Args are passed as an argument vector, never through a shell.
	Args []string
	// Stdin is the script's standard input; empty means /dev/null (NUL).
	Stdin []byte
	// Env holds extra variables (PROXY_WORK_ID, ...) added to a minimal base
	// environment; they override a base variable of the same name.
	Env map[string]string
	// Deadline is when the run must be over, computed by the caller from the
	// time remaining. The zero time means no deadline: only ctx bounds the run.
	Deadline time.Time
	// Limits bound the output.
	Limits Limits
	// Reaper, when set, kills the script's process tree if this process
	// dies while the script runs (see NewReaper). Nil: nothing does.
	Reaper *Reaper
	// WorkID is the unit's id, which the reaper names when it kills the
	// script ("" when there is none).
	WorkID string
	// Started, when set, is called once the script has started (its
	// process created and handed its tree), before Run waits for it: a
	// caller that waited for the resources an earlier start lacked knows
	// then that it waits no more, however long the script runs.
	Started func()
}

// Result is what a script that ran and exited produced.
type Result struct {
	// ExitCode is the exit status; 128+signal when killed by a signal (unix).
	ExitCode        int
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	// StartedAt is when the process started, FinishedAt when it exited.
	StartedAt  time.Time
	FinishedAt time.Time
	// Leftovers is why what the script left running (its session's
	// processes, on linux; its job's, on windows) may not have been
	// killed after it exited, or nil. The result stands: the script ran
	// and exited.
	Leftovers error
}
