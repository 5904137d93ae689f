package runner

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// beforeRegister, when set, runs between a script's start and its
// registration with the reaper: a test stops a proxy there.
var beforeRegister func()

// Run resolves and runs the script of spec.
//
// It returns a Result when the script ran and exited, whatever its exit code.
// It returns an error and no Result when the script could not be resolved
// (ErrBadScriptName, ErrUnknownScript, ErrOutsideScripts) or started
// (ErrStart; also ErrNoResources when the host was out of file
// descriptors, processes or memory, and nothing of the script ran). It
// returns an error when spec.Deadline passed (ErrDeadline) or ctx was
// cancelled (ErrCancelled): the whole process tree has been killed, and
// the Result holds what the script wrote until then, and when it started
// and was killed (no exit code); if the deadline had passed or ctx was
// done before the start, nothing was started (ErrNotStarted) and the
// Result is empty. A kill that failed is ErrKillFailed.
func Run(ctx context.Context, spec Spec) (Result, error) {
	path, err := ResolveScript(spec.ScriptsDir, spec.Script)
	if err != nil {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("script %q: %w %w", spec.Script, ErrCancelled, ErrNotStarted)
	}
	if !spec.Deadline.IsZero() && !time.Now().Before(spec.Deadline) {
		return Result{}, fmt.Errorf("script %q: %w %w", spec.Script, ErrDeadline, ErrNotStarted)
	}
	env, err := environ(spec.Env)
	if err != nil {
		return Result{}, fmt.Errorf("script %q: %w", spec.Script, err)
	}
	cmd, err := commandFor(path, spec.Args)
	if err != nil {
		return Result{}, err
	}
	cmd.Dir = spec.ScriptsDir
	cmd.Env = env
	configureCmd(cmd)
	streams, err := attachStdio(cmd, spec.Stdin, spec.Limits.maxOutput())
	if err != nil {
		return Result{}, fmt.Errorf("%w %q: %w", ErrStart, spec.Script, startFailed(fmt.Errorf("making pipes: %w", err)))
	}
	// The reaper is told before the start (started at the first script,
	// so that this one is registered a moment after it), and finds the
	// script by its unit's id if the proxy dies before it registers it.
	starting := spec.WorkID
	if spec.Env[WorkIDVar] != starting {
		starting = ""
	}
	spec.Reaper.prepare(starting)
	if err := cmd.Start(); err != nil {
		spec.Reaper.notStarted(starting)
		streams.abort()
		if short := startFailed(err); short != err {
			return Result{}, fmt.Errorf("%w %q: %w", ErrStart, spec.Script, short)
		}
		return Result{}, fmt.Errorf("%w %q: %s%w", ErrStart, spec.Script, startHint(path, err), err)
	}
	// Until Run returns, the reaper kills the tree if the proxy dies
	// (before Wait: the pid cannot have been reused yet). Registered
	// before its stdin is fed: a script that reads it first does nothing
	// else before it is registered. Deregistered last, once the tree was
	// killed (tree.release) and the script reaped.
	if beforeRegister != nil {
		beforeRegister()
	}
	defer spec.Reaper.register(cmd.Process.Pid, spec.WorkID)()
	startedAt := time.Now()
	streams.started()
	tree, err := afterStart(cmd)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		streams.finish(waitDelay)
		return Result{}, fmt.Errorf("%w %q: %w", ErrStart, spec.Script, err)
	}
	defer tree.release()
	if spec.Started != nil {
		spec.Started()
	}

	exited := make(chan error, 1)
	go func() {
		awaitExit(cmd.Process.Pid) // holding no thread while the script runs
		exited <- cmd.Wait()
	}()
	var expired <-chan time.Time
	if !spec.Deadline.IsZero() {
		timer := time.NewTimer(time.Until(spec.Deadline))
		defer timer.Stop()
		expired = timer.C
	}

	var waitErr, stop error
	select {
	case waitErr = <-exited:
	case <-expired:
		stop = ErrDeadline
	case <-ctx.Done():
		stop = ErrCancelled
	}
	finishedAt := time.Now()
	// Kill the tree in every case: at the deadline or on cancel it is the
	// point; after a normal exit it ends what the script left behind, so
	// that nothing of the unit runs past its result (and a leftover that
	// holds the output pipes cannot delay it).
	var killErr error
	if stop != nil {
		// First what left the script's session while of its tree (setsid):
		// found through parents, which the kill below ends.
		killErr = tree.killDescendants()
	}
	killErr = errors.Join(killErr, tree.kill())
	if stop == nil {
		// Also what left the group without leaving the tree (timeout(1)
		// in the background).
		killErr = errors.Join(killErr, tree.killLeftovers(finishedAt.Sub(startedAt)))
	} else {
		// And whatever of the tree left the group without leaving the
		// tree (timeout(1), a shell's job control), however the group
		// kill went.
		killErr = errors.Join(killErr, tree.killRest())
		// Also kill the script itself, however the tree kill went, so that
		// Wait returns.
		_ = cmd.Process.Kill()
		<-exited
	}
	streams.finish(waitDelay)

	res := Result{
		Stdout:          streams.stdout.buf,
		Stderr:          streams.stderr.buf,
		StdoutTruncated: streams.stdout.truncated,
		StderrTruncated: streams.stderr.truncated,
		StartedAt:       startedAt,
		FinishedAt:      finishedAt,
	}
	if stop != nil {
		// What it wrote until it was killed, which a run cut short by the
		// proxy's stop reports (one cut at its deadline reports nothing).
		if killErr != nil {
			return res, fmt.Errorf("script %q: %w; %w: %v", spec.Script, stop, ErrKillFailed, killErr)
		}
		return res, fmt.Errorf("script %q: %w; its process tree was killed", spec.Script, stop)
	}
	if cmd.ProcessState == nil {
		return Result{}, fmt.Errorf("waiting for script %q: %w", spec.Script, waitErr)
	}
	// A failed kill of leftovers after a normal exit does not undo the
	// result: the script ran and exited. It is said beside it.
	res.ExitCode, res.Leftovers = exitCode(cmd.ProcessState), killErr
	return res, nil
}
