package agent

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/loglimit"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

// TestCommandsThatCouldNotRunAreLoggedWithinABound: a scripts directory
// gone from under the proxy fails every unit; with callers queueing units
// all the while, the log has at most loglimit.DefaultLines lines of them
// a minute, not one per unit (each is still reported, with its reason).
func TestCommandsThatCouldNotRunAreLoggedWithinABound(t *testing.T) {
	t.Parallel()
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{}, fmt.Errorf("%w \"s\": scripts directory \"/gone\": no such file or directory", runner.ErrUnknownScript)
	})
	f := newFake()
	var log bytes.Buffer
	const units = loglimit.DefaultLines + 10
	stop := startAgent(t, f, units, &log)
	f.responses <- &automatorv1.PollResponse{Claims: claimsOfS(t, units)}
	for range units {
		got := waittest.Recv(t, f.completed, "each unit's failure to be reported")
		if got.GetOutcome() != automatorv1.Outcome_OUTCOME_FAILED {
			t.Fatalf("%s reported %v, want FAILED", got.GetWorkId(), got.GetOutcome())
		}
	}
	stop()
	if n := strings.Count(log.String(), "could not run the command"); n != loglimit.DefaultLines {
		t.Fatalf("%d lines for %d units that could not run within a minute, want %d:\n%s", n, units, loglimit.DefaultLines, log.String())
	}
}

// TestScriptsKilledAtTheirDeadlineAreLoggedWithinABound: scripts that
// hang (a dependency down) are killed at their units' deadlines; with
// callers queueing short units all the while, the log has at most
// loglimit.DefaultLines lines of them a minute, not one per unit.
func TestScriptsKilledAtTheirDeadlineAreLoggedWithinABound(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{}, 64)
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		ran <- struct{}{}
		return runner.Result{}, runner.ErrDeadline
	})
	f := newFake()
	var log bytes.Buffer
	const units = loglimit.DefaultLines + 10
	stop := startAgent(t, f, units, &log)
	f.responses <- &automatorv1.PollResponse{Claims: claimsOfS(t, units)}
	for range units {
		waittest.Recv(t, ran, "each unit's script to run")
	}
	stop() // waits for every unit to be handled
	if n := strings.Count(log.String(), "deadline reached: process tree killed"); n != loglimit.DefaultLines {
		t.Fatalf("%d lines for %d units killed at their deadline within a minute, want %d:\n%s", n, units, loglimit.DefaultLines, log.String())
	}
}

// claimsOfS returns n claims, w0 to w(n-1), of the script "s".
func claimsOfS(t *testing.T, n int) []*automatorv1.Claim {
	var claims []*automatorv1.Claim
	for i := range n {
		claims = append(claims, claim(t, fmt.Sprintf("w%d", i), &automatorv1.Command{Script: "s"}))
	}
	return claims
}
