package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

// handle opens, runs and reports one claim. The deadline comes from the
// time remaining on the automator's clock, counted from when the claim was
// made as this host's clock tells it (from: the poll's sending plus the
// time the automator held it, or when the answer arrived if earlier,
// before it was read when this process was stopped meanwhile: claimedAt,
// freezeWatch), so this host's clock skew changes nothing (guarantee 6),
// nor does a slow link give the script time past its unit's deadline.
func (a *Agent) handle(runCtx, postCtx context.Context, c *automatorv1.Claim, from time.Time) {
	remaining := c.GetRemaining().AsDuration()
	deadline := from.Add(remaining)
	log := a.log.With("work_id", c.GetWorkId(), "account", c.GetAccount())
	if remaining <= 0 || !time.Now().Before(deadline) {
		// The automator's answer came after the deadline it was computed
		// for, or was read after it, this process stopped meanwhile: the
		// unit times out there. Nothing runs, not even a built-in or a
		// failure report, since nothing is reported after the deadline
		// (guarantee 7).
		log.Warn("claim arrived past its deadline: nothing runs, nothing reported", "remaining", remaining, "read_after", time.Since(from).Round(time.Millisecond))
		return
	}

	cmd, err := openCommand(a.o.Keys, c)
	if err != nil {
		// Nothing runs. The reason is plain: no result can be sealed for a
		// unit whose key we may not hold.
		log.Error("command did not open; nothing runs", "err", err)
		a.post(postCtx, c, deadline, &automatorv1.CompleteRequest{
			Outcome: automatorv1.Outcome_OUTCOME_FAILED,
			Failure: fmt.Sprintf("%v (on instance %s)", err, a.o.InstanceID),
		})
		return
	}

	res, err := a.execute(runCtx, c, cmd, deadline)
	switch {
	case errors.Is(err, runner.ErrDeadline):
		// Guarantee 7: killed at the deadline, nothing is reported.
		a.logStopped(slog.LevelWarn, "deadline reached", c, cmd, err)
		return
	case errors.Is(err, runner.ErrCancelled) && errors.Is(context.Cause(runCtx), errCancelledByAutomator):
		a.logStopped(slog.LevelInfo, "unit ended on the automator", c, cmd, err)
		return
	case errors.Is(err, runner.ErrCancelled) && errors.Is(err, runner.ErrNotStarted):
		// Waiting for what its start lacked, say: nothing was killed.
		res = &automatorv1.Result{Failure: fmt.Sprintf("%v: not started on instance %s, nothing of it ran: %v", context.Cause(runCtx), a.o.InstanceID, err)}
	case errors.Is(err, runner.ErrCancelled) && errors.Is(err, runner.ErrKillFailed):
		res = cutShort(res, fmt.Sprintf("%v: killed on instance %s, but some of its process tree may still run: %v", context.Cause(runCtx), a.o.InstanceID, err))
	case errors.Is(err, runner.ErrCancelled):
		res = cutShort(res, fmt.Sprintf("%v: killed on instance %s", context.Cause(runCtx), a.o.InstanceID))
	case err != nil:
		res = &automatorv1.Result{Failure: err.Error()}
	}
	res.InstanceId = a.o.InstanceID
	outcome := automatorv1.Outcome_OUTCOME_SUCCEEDED
	if res.GetFailure() != "" {
		outcome = automatorv1.Outcome_OUTCOME_FAILED
		msg := "could not run the command"
		if errors.Is(err, runner.ErrCancelled) && !errors.Is(err, runner.ErrNotStarted) {
			// It ran, in part: a stop past its grace period killed it.
			msg = "the command was killed before it ended; reported failed"
		}
		a.failLog.Log(msg, "work_id", c.GetWorkId(), "account", c.GetAccount(), "script", cmd.GetScript(), "reason", res.GetFailure())
		// The reason may quote a path whose bytes are not UTF-8 (a
		// scripts_dir named in Latin-1): a protobuf string takes none, and
		// the result would not seal, leaving the unit to time out.
		res.Failure = strings.ToValidUTF8(res.GetFailure(), "\uFFFD")
	}
	sealed, err := a.sealResult(c, res)
	if err != nil {
		log.Error("sealing the result", "err", err)
		return
	}
	a.post(postCtx, c, deadline, &automatorv1.CompleteRequest{Outcome: outcome, SealedResult: sealed})
}

// cutShort is the failed result of a script killed before it ended (the
// proxy stopped, its grace period over): partial, what it wrote until then
// and when it started (nil when that is not known), with the failure.
func cutShort(partial *automatorv1.Result, failure string) *automatorv1.Result {
	if partial == nil {
		return &automatorv1.Result{Failure: failure}
	}
	partial.ExitCode, partial.Failure = 0, failure
	return partial
}

// logStopped logs a unit whose run was stopped (at its deadline, or ended
// on the automator), whose result is not reported: what became of its
// script, said at level, or as a warning when the kill of its process
// tree failed (the reason then follows).
func (a *Agent) logStopped(level slog.Level, why string, c *automatorv1.Claim, cmd *automatorv1.Command, err error) {
	attrs := []any{"work_id", c.GetWorkId(), "account", c.GetAccount(), "script", cmd.GetScript()}
	switch {
	case errors.Is(err, runner.ErrNotStarted):
		a.killLog.LogAt(level, why+": the script was not started, nothing reported", attrs...)
	case errors.Is(err, runner.ErrKillFailed):
		a.killLog.LogAt(slog.LevelWarn, why+": process tree killed, but some of it may still run, nothing reported", append(attrs, "err", err)...)
	default:
		a.killLog.LogAt(level, why+": process tree killed, nothing reported", attrs...)
	}
}

// openCommand opens and decodes a claim's sealed command.
func openCommand(keys crypto.KeyRing, c *automatorv1.Claim) (*automatorv1.Command, error) {
	plain, err := crypto.Open(keys, c.GetAccount(), c.GetWorkId(), crypto.DirCommand, c.GetSealedCommand())
	if err != nil {
		return nil, fmt.Errorf("sealed command did not open: %w", err)
	}
	var cmd automatorv1.Command
	if err := proto.Unmarshal(plain, &cmd); err != nil {
		return nil, errors.New("sealed command opened but holds no valid command")
	}
	return &cmd, nil
}

// execute runs a built-in (named "@...") or a script from the scripts
// directory.
func (a *Agent) execute(ctx context.Context, c *automatorv1.Claim, cmd *automatorv1.Command, deadline time.Time) (*automatorv1.Result, error) {
	if strings.HasPrefix(cmd.GetScript(), "@") {
		return a.builtin(cmd)
	}
	if err := a.allowedEnv(cmd.GetEnv()); err != nil {
		return nil, err
	}
	env := make(map[string]string, len(cmd.GetEnv())+4)
	for k, v := range cmd.GetEnv() {
		env[k] = v
	}
	// Set last: a caller cannot forge them. (A command's variable that
	// differs from one of them only in case is the same variable on
	// windows; the runner refuses such a pair.)
	env[runner.WorkIDVar] = c.GetWorkId() // also how its reaper finds the script (runner.Spec.WorkID)
	env["PROXY_ACCOUNT"] = c.GetAccount()
	env["PROXY_INSTANCE_ID"] = a.o.InstanceID
	env[deadlineSecondsVar] = deadlineSeconds(deadline)
	a.scripts.Add(1)
	defer a.scripts.Add(-1)
	r, err := a.runStarting(ctx, runner.Spec{
		ScriptsDir: a.o.ScriptsDir,
		Script:     cmd.GetScript(),
		Args:       cmd.GetArgs(),
		Stdin:      cmd.GetStdin(),
		Env:        env,
		Deadline:   deadline,
		Limits:     runner.Limits{MaxOutput: a.o.MaxOutput},
		Reaper:     a.o.Reaper,
		WorkID:     c.GetWorkId(),
	}, deadline)
	if err != nil {
		if r.StartedAt.IsZero() {
			return nil, err
		}
		return resultOf(r), err // what it wrote until it was killed
	}
	if r.Leftovers != nil {
		a.leftLog.Log("script exited, but what it left running may still run: killing it failed", "work_id", c.GetWorkId(), "account", c.GetAccount(), "script", cmd.GetScript(), "err", r.Leftovers)
	}
	return resultOf(r), nil
}

// resultOf is the result a script's run reports.
func resultOf(r runner.Result) *automatorv1.Result {
	return &automatorv1.Result{
		ExitCode:        int32(r.ExitCode),
		Stdout:          r.Stdout,
		Stderr:          r.Stderr,
		StdoutTruncated: r.StdoutTruncated,
		StderrTruncated: r.StderrTruncated,
		StartedAt:       timestamppb.New(r.StartedAt),
		FinishedAt:      timestamppb.New(r.FinishedAt),
	}
}

func (a *Agent) sealResult(c *automatorv1.Claim, r *automatorv1.Result) ([]byte, error) {
	plain, err := proto.Marshal(r)
	if err != nil {
		return nil, err
	}
	keyID, err := crypto.BlobKeyID(c.GetSealedCommand())
	if err != nil {
		return nil, err
	}
	k, ok := a.o.Keys.Key(keyID)
	if !ok {
		return nil, fmt.Errorf("no key with id %d", keyID)
	}
	return crypto.Seal(k, c.GetAccount(), c.GetWorkId(), crypto.DirResult, plain)
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// deadlineSecondsVar tells a script the whole seconds left until its
// unit's deadline, as they are when it starts (deadlineSeconds).
const deadlineSecondsVar = "PROXY_DEADLINE_SECONDS"

// deadlineSeconds is the value of deadlineSecondsVar for a script that
// starts now: the whole seconds left, rounded down.
func deadlineSeconds(deadline time.Time) string {
	return strconv.Itoa(int(time.Until(deadline).Seconds()))
}

// allowedEnv refuses a command that sets a variable this proxy's
// allowed_env does not list, naming the first in order. Without
// allowed_env, a command may set none.
func (a *Agent) allowedEnv(env map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		switch {
		case a.o.AllowedEnv.Allows(k):
		case len(a.o.AllowedEnv) == 0:
			return fmt.Errorf("environment variable %q is refused: instance %s's config has no allowed_env, the only variables a command may set for its scripts (allowed_env: [%s] lets it); nothing ran", k, a.o.InstanceID, k)
		default:
			return fmt.Errorf("environment variable %q is refused: instance %s's allowed_env does not list it; nothing ran", k, a.o.InstanceID)
		}
	}
	return nil
}
