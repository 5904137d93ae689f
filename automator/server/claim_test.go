package server_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestClaimIsNeverGivenTwice: 8 pollers over real gRPC drain one queue of
// 2,000 units; every unit is claimed exactly once, checked from the claims
// the pollers received and from an execution log they append to.
func TestClaimIsNeverGivenTwice(t *testing.T) {
	t.Parallel()
	const units, pollers = 500, 8
	e := newEnv(t, envOptions{pollWindow: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	caller := e.callerClient()

	// Submit from 4 callers while the pollers already run.
	want := make(map[string]string, units) // work id → its argument
	var wantMu sync.Mutex
	var submitters sync.WaitGroup
	for c := range 4 {
		submitters.Add(1)
		go func() {
			defer submitters.Done()
			for i := c; i < units; i += 4 {
				arg := fmt.Sprint(i)
				st, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{
					Account: e.account,
					Command: &automatorv1.Command{Script: "echo.sh", Args: []string{arg}},
					Timeout: durationpb.New(5 * time.Minute),
				})
				if err != nil {
					t.Errorf("submit %d: %v", i, err)
					return
				}
				wantMu.Lock()
				want[st.GetWorkId()] = arg
				wantMu.Unlock()
			}
		}()
	}

	logPath := filepath.Join(t.TempDir(), "executions.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	var mu sync.Mutex
	claimedBy := make(map[string][]string) // work id → pollers that got it
	completed := 0
	var wg sync.WaitGroup
	for p := range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("poller-%d", p)
			client := e.proxyClient()
			for {
				mu.Lock()
				done := completed >= units
				mu.Unlock()
				if done || ctx.Err() != nil {
					return
				}
				resp, err := client.Poll(ctx, &automatorv1.PollRequest{
					InstanceId: name,
					MaxUnits:   int32(1 + rand.IntN(4)),
					Wait:       durationpb.New(200 * time.Millisecond),
				})
				if err != nil {
					t.Errorf("%s: poll: %v", name, err)
					return
				}
				for _, c := range resp.GetClaims() {
					cmd := e.openCommand(c)
					mu.Lock()
					claimedBy[c.GetWorkId()] = append(claimedBy[c.GetWorkId()], name)
					fmt.Fprintf(logFile, "%s %s\n", c.GetWorkId(), name)
					mu.Unlock()
					_, err := client.Complete(ctx, &automatorv1.CompleteRequest{
						WorkId:       c.GetWorkId(),
						ClaimId:      c.GetClaimId(),
						InstanceId:   name,
						Outcome:      automatorv1.Outcome_OUTCOME_SUCCEEDED,
						SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte(cmd.GetArgs()[0])}),
					})
					if err != nil {
						t.Errorf("%s: complete %s: %v", name, c.GetWorkId(), err)
						return
					}
					mu.Lock()
					completed++
					mu.Unlock()
				}
			}
		}()
	}
	submitters.Wait()
	wg.Wait()
	if t.Failed() {
		return
	}

	if len(claimedBy) != units {
		t.Fatalf("%d distinct units claimed, want %d", len(claimedBy), units)
	}
	for id, by := range claimedBy {
		if len(by) != 1 {
			t.Errorf("unit %s claimed %d times, by %v", id, len(by), by)
		}
		if _, ok := want[id]; !ok {
			t.Errorf("claimed unit %s was never submitted", id)
		}
	}
	// The execution log, read back from disk, agrees.
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := make(map[string]int)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var id, who string
		fmt.Sscan(sc.Text(), &id, &who)
		seen[id]++
	}
	if len(seen) != units {
		t.Errorf("execution log names %d units, want %d", len(seen), units)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("unit %s executed %d times", id, n)
		}
	}
	// Every caller sees its own result.
	for id, arg := range want {
		st, err := caller.Get(ctx, &automatorv1.GetRequest{WorkId: id})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != arg {
			t.Fatalf("unit %s: state %v stdout %q, want succeeded %q", id, st.GetState(), st.GetResult().GetStdout(), arg)
		}
	}
}

// TestClaimCarriesTheTimeRemainingOnTheAutomatorsClock (guarantee 6): a
// unit that waited in the queue is handed to its claimer with the time left
// until its deadline on the automator's clock, not its whole timeout, so a
// proxy never runs a script past the deadline its caller was given.
func TestClaimCarriesTheTimeRemainingOnTheAutomatorsClock(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	queued := clock.Now()
	st, err := e.callerClient().Submit(context.Background(), &automatorv1.ExecuteRequest{
		Account: e.account,
		Command: &automatorv1.Command{Script: "x.sh"},
		Timeout: durationpb.New(5 * time.Minute),
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if got, want := st.GetDeadline().AsTime(), queued.Add(5*time.Minute); !got.Equal(want) {
		t.Errorf("deadline %v, want the queue time plus the timeout, %v", got, want)
	}

	clock.Advance(2 * time.Minute)
	resp, err := pollNow(e.proxyClient(), "a", 1)
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v, %d claims; want one", err, len(resp.GetClaims()))
	}
	if got := resp.GetClaims()[0].GetRemaining().AsDuration(); got != 3*time.Minute {
		t.Errorf("claim made 2m after queueing carries %v remaining, want 3m (the deadline minus the automator's now)", got)
	}
}

// TestClaimNeverCarriesMoreThanItsTimeout: when the automator's clock steps
// back (an NTP step of an hour) between a unit's queueing and its claim, the
// deadline on that clock is now further away than the caller's whole
// timeout; the claimer is handed the timeout at most, so the script is
// killed no later than the timeout after its start, never an hour late.
func TestClaimNeverCarriesMoreThanItsTimeout(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock})
	submit(t, e.callerClient(), e.account, 5*time.Minute)
	clock.Advance(-time.Hour)
	resp, err := pollNow(e.proxyClient(), "a", 1)
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v, %d claims; want one", err, len(resp.GetClaims()))
	}
	if got := resp.GetClaims()[0].GetRemaining().AsDuration(); got != 5*time.Minute {
		t.Errorf("claim made after the automator's clock stepped back an hour carries %v remaining, want the 5m timeout at most", got)
	}
}
