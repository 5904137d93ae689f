package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/opsgate/opsgate/internal/ctxtime"
	"github.com/opsgate/opsgate/proxy/runner"
)

// A script whose start fails for want of a resource of the host that
// frees as processes end (file descriptors, processes, memory:
// runner.ErrNoResources) did not run at all, so it is started again, a
// little later, rather than failed at once: the host may be short only
// because of the scripts running now, and failing each unit as soon as it
// was claimed turned a host short of processes into one that claimed the
// account's whole queue and failed it within a second, units that other
// instances, or this one a moment later, could have run. Meanwhile the
// agent claims no more units (pollLoop): each would only wait too.
//
// A start is tried again for at most startWaitFor, and at most half the
// time the unit has left, so that the failure, when the host stays short,
// is posted in time: "cannot start script …: the proxy has as many files
// open as its limit allows …: … (waited 30s for it)".

// startWaitFor bounds how long a unit waits for the resources its
// script's start lacked. Tests change it per Agent (tuning).
const startWaitFor = 30 * time.Second

// startRetryMin and startRetryMax bound the wait between two starts of a
// script that lacked resources.
const (
	startRetryMin = 100 * time.Millisecond
	startRetryMax = 2 * time.Second
)

// runStarting runs spec (tune.runScript), starting its script again while
// the host lacks the resources to start it, until it starts, deadline is
// half as near as it was, tune.startWaitFor has passed, or ctx ends. The
// unit waits no more once its script has started (spec.Started), not once
// it has ended: the poll loop claims units again meanwhile. Each start
// tells the script the time then left (PROXY_DEADLINE_SECONDS).
func (a *Agent) runStarting(ctx context.Context, spec runner.Spec, deadline time.Time) (runner.Result, error) {
	waiting := false
	spec.Started = func() {
		if waiting {
			waiting = false
			a.startWaiting(-1, nil)
		}
		a.startsAgain()
	}
	defer func() {
		if waiting {
			a.startWaiting(-1, nil)
		}
	}()
	r, err := a.o.tune.runScript(ctx, spec)
	if !errors.Is(err, runner.ErrNoResources) {
		return r, err
	}
	began := time.Now()
	giveUp := began.Add(min(a.o.tune.startWaitFor, time.Until(deadline)/2))
	waiting = true
	a.startWaiting(+1, err)
	bo := backoff{min: startRetryMin, max: startRetryMax}
	// cancelled is the error of a unit cancelled while it waited, which
	// says what its start lacked.
	cancelled := func(lacked error) error {
		return fmt.Errorf("script %q: %w %w, while it waited for what its start lacked (%v)", spec.Script, runner.ErrCancelled, runner.ErrNotStarted, lacked)
	}
	for {
		wait := bo.next()
		if time.Now().Add(wait).After(giveUp) {
			return runner.Result{}, fmt.Errorf("%w (waited %v for it)", err, time.Since(began).Round(100*time.Millisecond))
		}
		if !ctxtime.Sleep(ctx, wait) {
			return runner.Result{}, cancelled(err)
		}
		spec.Env[deadlineSecondsVar] = deadlineSeconds(deadline)
		lacked := err
		r, err = a.o.tune.runScript(ctx, spec)
		if errors.Is(err, runner.ErrCancelled) && errors.Is(err, runner.ErrNotStarted) {
			return runner.Result{}, cancelled(lacked) // cancelled just after the wait
		}
		if !errors.Is(err, runner.ErrNoResources) {
			return r, err
		}
	}
}

// startWaiting counts a unit in (+1, its start failed with err) or out
// (-1) of those waiting for resources. The first one in says that scripts
// cannot start (once until they start again); the last one out lets the
// poll loop claim units again.
func (a *Agent) startWaiting(delta int, err error) {
	a.mu.Lock()
	a.waitingStart += delta
	none := a.waitingStart == 0
	say := delta > 0 && !a.short
	if delta > 0 {
		a.short = true
	}
	a.mu.Unlock()
	if say {
		a.shortLog.Log("scripts cannot start: the host lacks a resource they need; units claimed wait for it, and no more are claimed meanwhile",
			"err", err, "units_wait_up_to", a.o.tune.startWaitFor)
	}
	if none {
		select {
		case a.slotFreed <- struct{}{}: // the poll loop may claim again
		default:
		}
	}
}

// startsAgain records that a script started, and says so once after
// starts lacked resources.
func (a *Agent) startsAgain() {
	a.mu.Lock()
	was := a.short
	a.short = false
	a.mu.Unlock()
	if was {
		a.shortLog.LogAt(slog.LevelInfo, "scripts start again: the host has what they need")
	}
}

// waitingForStarts reports whether a unit waits for the resources its
// script's start lacked: the poll loop claims nothing then.
func (a *Agent) waitingForStarts() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waitingStart > 0
}
