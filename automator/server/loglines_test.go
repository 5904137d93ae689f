package server_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestRepeatedRefusalsLogBoundedLines: the refusals a proxy or a caller
// repeats for as long as its mistake lasts (a poll holding another
// account's key or no usable key, a unit past the account's queue cap, an
// API key used outside its accounts) write 20 lines of each kind a minute,
// each kind within its own budget, and then one line counting the rest:
// a fleet left behind by a key rotation, or a caller that submits again at
// once, does not fill the automator's log.
func TestRepeatedRefusalsLogBoundedLines(t *testing.T) {
	t.Parallel()
	const each, ownLines = 25, 20
	log := &syncLog{}
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, log: log, limits: server.Limits{MaxQueuedPerAccount: 1}})
	_, otherKey := e.addAccount("other")
	e.addAccount("globex")
	px := e.proxyClient()
	caller := e.callerClient()
	submitScript(t, caller, e.account, "x.sh", time.Hour) // the queue at its cap
	scoped := automatorv1.NewAutomatorServiceClient(e.conn(e.addAPIKey("k-globex", "globex")))
	ctx := context.Background()

	kinds := []struct {
		name, line, summary string
		refuse              func() error
		code                codes.Code
	}{
		{"a poll holding another account's key", "not its account's key of that id", "polls refused for their instance's keys, not logged one by one",
			func() error {
				_, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "wrong", MaxUnits: 1, Wait: durationpb.New(0),
					KeyIds: []uint32{otherKey.ID}, KeyChecks: [][]byte{crypto.KeyCheck(otherKey)}})
				return err
			}, codes.FailedPrecondition},
		{"a unit past the queue's cap", "account queue full: unit refused", "units refused for a full queue, not logged one by one",
			func() error {
				_, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
				return err
			}, codes.ResourceExhausted},
		{"an API key outside its accounts", "API key used outside its accounts", "calls of API keys outside their accounts, not logged one by one",
			func() error {
				_, err := scoped.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
				return err
			}, codes.PermissionDenied},
	}
	for _, k := range kinds {
		for n := range each {
			if err := k.refuse(); status.Code(err) != k.code {
				t.Fatalf("%s, %d: %v; want %v", k.name, n+1, err, k.code)
			}
		}
	}
	for _, k := range kinds {
		if got := len(log.lines(k.line)); got != ownLines {
			t.Errorf("%d refusals of %s wrote %d lines of their own; want %d", each, k.name, got, ownLines)
		}
		if got := log.lines(k.summary); len(got) != 0 {
			t.Errorf("%s: a count within the minute: %q; want none yet", k.name, got)
		}
	}
	// The minute over, the next refusal's line comes after one that
	// counts those not logged.
	clock.Advance(time.Minute)
	for _, k := range kinds {
		if err := k.refuse(); status.Code(err) != k.code {
			t.Fatalf("%s a minute later: %v; want %v", k.name, err, k.code)
		}
		summary := log.lines(k.summary)
		if len(summary) != 1 {
			t.Fatalf("%s: count lines %q; want one", k.name, summary)
		}
		m := regexp.MustCompile(`count=(\d+)`).FindStringSubmatch(summary[0])
		if m == nil {
			t.Fatalf("%s: the count line %q has no count", k.name, summary[0])
		}
		if n, _ := strconv.Atoi(m[1]); n != each-ownLines {
			t.Errorf("%s: the count line %q; want count=%d", k.name, summary[0], each-ownLines)
		}
		if got := len(log.lines(k.line)); got != ownLines+1 {
			t.Errorf("%s: %d lines of their own after the minute, want %d", k.name, got, ownLines+1)
		}
	}
}

// TestRefusalsNotLoggedAreCountedOnceTheMinuteIsOverWithoutAnother: the
// line counting the refusals not logged one by one (polls holding no
// usable key, units past the queue's cap, API keys used outside their
// accounts) is written once their minute is over even when no refusal
// comes after it: the sweeper writes it, so the log's last word on a
// fleet left behind by a rotation that was then fixed is not the
// twentieth line.
func TestRefusalsNotLoggedAreCountedOnceTheMinuteIsOverWithoutAnother(t *testing.T) {
	t.Parallel()
	const each, ownLines = 25, 20
	log := &syncLog{}
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, log: log, limits: server.Limits{MaxQueuedPerAccount: 1}, sweepInterval: 20 * time.Millisecond})
	e.addAccount("globex")
	px := e.proxyClient()
	caller := e.callerClient()
	submitScript(t, caller, e.account, "x.sh", time.Hour) // the queue at its cap
	scoped := automatorv1.NewAutomatorServiceClient(e.conn(e.addAPIKey("k-globex", "globex")))
	ctx := context.Background()

	kinds := []struct {
		name, line, summary string
		refuse              func() error
		code                codes.Code
	}{
		{"a poll holding no usable key", "instance holds no usable key of its account", "polls refused for their instance's keys, not logged one by one",
			func() error {
				_, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "behind", MaxUnits: 1, Wait: durationpb.New(0), KeyIds: []uint32{99}})
				return err
			}, codes.FailedPrecondition},
		{"a unit past the queue's cap", "account queue full: unit refused", "units refused for a full queue, not logged one by one",
			func() error {
				_, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
				return err
			}, codes.ResourceExhausted},
		{"an API key outside its accounts", "API key used outside its accounts", "calls of API keys outside their accounts, not logged one by one",
			func() error {
				_, err := scoped.Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
				return err
			}, codes.PermissionDenied},
	}
	for _, k := range kinds {
		for n := range each {
			if err := k.refuse(); status.Code(err) != k.code {
				t.Fatalf("%s, %d: %v; want %v", k.name, n+1, err, k.code)
			}
		}
		if got := len(log.lines("level=WARN", k.line)); got != ownLines {
			t.Errorf("%d refusals of %s wrote %d lines of their own at WARN; want %d", each, k.name, got, ownLines)
		}
	}
	clock.Advance(time.Minute)
	for _, k := range kinds {
		summary := log.awaitLines(t, "the sweeper to count "+k.name+" not logged once the minute is over", k.summary)
		if len(summary) != 1 || !strings.Contains(summary[0], "count="+strconv.Itoa(each-ownLines)) || !strings.Contains(summary[0], "level=WARN") {
			t.Errorf("%s: count lines once the minute is over, with no refusal after it: %q; want one at WARN counting %d", k.name, summary, each-ownLines)
		}
	}
}
