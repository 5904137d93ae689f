//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/client"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// callers drive executeOnProxy the way a package does across automator
// restarts: Submit with an idempotency key (retried while the automator is
// unreachable, so a submit whose answer was lost never makes a second
// unit), then Wait by work id, again and again until the unit ends. Each
// records what it asked and saw.
//
// With several replicas (replicas set, client unused) caller i starts on
// replica i mod n, and each call that finds its replica unreachable is made
// again on the next one, as the client library does with several addresses:
// a Wait cut by a replica's death waits again by id on another. With gos
// set, the client library itself does that (Submit, then Wait by id).
type callers struct {
	client   automatorv1.AutomatorServiceClient
	replicas []automatorv1.AutomatorServiceClient
	// gos, when set, are the callers' own Go clients (automator/client),
	// one per caller, each given every replica's address starting with
	// its own: the callers submit and wait through them instead
	// (TestChaosPG), and replicas serves the reads after the run.
	gos     []*client.Client
	account string
	execLog string
	seed    uint64
	// Timeouts of ordinary units are drawn from [minTimeout, maxTimeout].
	minTimeout, maxTimeout time.Duration

	mu    sync.Mutex
	units []Unit
	acked atomic.Int64
	ended atomic.Int64
}

// run starts n callers. Each submits units until submitting is done (or
// enough units have been acknowledged, when atLeast > 0, and then only if
// the hard stop allows), and waits for each to end. It returns when every
// caller has seen its last unit end.
func (cs *callers) run(submitting, hard context.Context, n int, atLeast int) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cs.seed, uint64(i)+1))
			for seq := 0; ; seq++ {
				if hard.Err() != nil || (submitting.Err() != nil && (atLeast <= 0 || cs.acked.Load() >= int64(atLeast))) {
					return
				}
				var u Unit
				if cs.gos != nil {
					u = cs.oneGo(cs.gos[i], i, seq, rng)
				} else {
					u = cs.one(i, seq, rng)
				}
				cs.mu.Lock()
				cs.units = append(cs.units, u)
				cs.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// Units returns what the callers recorded.
func (cs *callers) Units() []Unit {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]Unit(nil), cs.units...)
}

// spec draws the next unit: mostly quick echoes (some slow), a few for a
// script that does not exist (failed), a few that run past their deadline
// (timed out; the proxy kills them).
func (cs *callers) spec(caller, seq int, rng *rand.Rand) (Unit, *automatorv1.Command) {
	u := Unit{Caller: caller, Key: fmt.Sprintf("chaos-%d-%d-%d", cs.seed, caller, seq)}
	tok := fmt.Sprintf("t%d.%d", caller, seq)
	stdin := randText(rng, 4+rng.IntN(40))
	exit := rng.IntN(4)
	sleep := "0"
	u.Timeout = cs.minTimeout + time.Duration(rng.Int64N(int64(cs.maxTimeout-cs.minTimeout)+1))
	switch r := rng.IntN(100); {
	case r < 3:
		u.Expect = ExpectFailed
		return u, &automatorv1.Command{Script: "missing.sh", Args: []string{tok}}
	case r < 5:
		u.Expect = ExpectTimedOut
		u.Timeout = 1500 * time.Millisecond
		sleep = "5"
	case r < 15:
		sleep = fmt.Sprintf("0.%d", 1+rng.IntN(6))
	}
	u.WantStdout = tok + ":" + stdin + "\n"
	u.WantExit = exit
	return u, &automatorv1.Command{
		Script: "echo.sh",
		Args:   []string{tok, sleep, strconv.Itoa(exit)},
		Stdin:  []byte(stdin),
		Env:    map[string]string{"CHAOS_LOG": cs.execLog},
	}
}

func randText(rng *rand.Rand, n int) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:-_=+*#%&()[]{}<>'\"\\$`|~"
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[rng.IntN(len(chars))]
	}
	return string(b)
}

// on returns the client of a caller's turn-th attempt, and the call options
// that go with it: with one automator the call waits for it to be
// reachable; with replicas it fails at once on one that is down, and the
// next attempt goes to the next replica.
func (cs *callers) on(caller, turn int) (automatorv1.AutomatorServiceClient, grpc.CallOption) {
	if len(cs.replicas) == 0 {
		return cs.client, grpc.WaitForReady(true)
	}
	return cs.replicas[(caller+turn)%len(cs.replicas)], grpc.WaitForReady(false)
}

// one submits a unit and waits for its end.
func (cs *callers) one(caller, seq int, rng *rand.Rand) Unit {
	ctx := context.Background()
	turn := 0
	u, cmd := cs.spec(caller, seq, rng)
	req := &automatorv1.ExecuteRequest{Account: cs.account, Command: cmd, Timeout: durationpb.New(u.Timeout), IdempotencyKey: u.Key}
	u.SubmittedAt = time.Now()
	var st *automatorv1.WorkStatus
	var err error
	for giveUp := time.Now().Add(time.Minute); time.Now().Before(giveUp) && ctx.Err() == nil; {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		client, ready := cs.on(caller, turn)
		st, err = client.Submit(actx, req, ready)
		cancel()
		if err == nil || !retryable(err) {
			break
		}
		turn++
		pause(ctx, 50*time.Millisecond)
	}
	if err != nil || st == nil {
		u.SubmitErr = fmt.Sprint(err)
		return u
	}
	cs.acked.Add(1)
	u.WorkID, u.AckedAt = st.GetWorkId(), time.Now()
	deadline := st.GetDeadline().AsTime()
	// Long enough for any automator outage; a unit still open then is lost.
	wctx, cancel := context.WithDeadline(context.Background(), deadline.Add(90*time.Second))
	defer cancel()
	for {
		client, ready := cs.on(caller, turn)
		st, err = client.Wait(wctx, &automatorv1.WaitRequest{WorkId: u.WorkID}, ready)
		if err == nil && terminal(stateName(st.GetState())) {
			break
		}
		if err != nil && (!retryable(err) || wctx.Err() != nil) {
			u.WaitErr = err.Error()
			return u
		}
		if err != nil {
			turn++
		}
		pause(wctx, 20*time.Millisecond)
	}
	cs.ended.Add(1)
	u.Seen, u.SeenAt = true, time.Now()
	record(&u, st)
	return u
}

// oneGo submits a unit and waits for its end through the Go client: the
// client retries the submit with the unit's idempotency key and resumes a
// cut or failed wait by id, on the next address when one is unavailable.
func (cs *callers) oneGo(c *client.Client, caller, seq int, rng *rand.Rand) Unit {
	u, cmd := cs.spec(caller, seq, rng)
	u.SubmittedAt = time.Now()
	// The caller's patience: longer than any outage of the run.
	ctx, cancel := context.WithTimeout(context.Background(), u.Timeout+2*time.Minute)
	defer cancel()
	w, err := c.Submit(ctx, cs.account, client.Command{Script: cmd.GetScript(), Args: cmd.GetArgs()},
		client.WithTimeout(u.Timeout), client.WithStdin(cmd.GetStdin()), client.WithEnv(cmd.GetEnv()), client.WithIdempotencyKey(u.Key))
	if err != nil {
		u.SubmitErr = err.Error()
		return u
	}
	cs.acked.Add(1)
	u.WorkID, u.AckedAt = w.ID, time.Now()
	w, err = c.Wait(ctx, w.ID)
	if err != nil {
		u.WaitErr = err.Error()
		return u
	}
	cs.ended.Add(1)
	u.Seen, u.SeenAt = true, time.Now()
	u.State, u.Reason = string(w.State), w.Reason
	u.QueuedAt, u.Deadline, u.ClaimedAt, u.FinishedAt = w.QueuedAt, w.Deadline, w.ClaimedAt, w.FinishedAt
	u.Claimer = w.InstanceID
	if r := w.Result; r != nil && w.State == client.StateSucceeded {
		u.HasResult, u.ResultInstance, u.ExitCode, u.Stdout = true, r.InstanceID, r.ExitCode, string(r.Stdout)
	}
	return u
}

// record copies a terminal status into u.
func record(u *Unit, st *automatorv1.WorkStatus) {
	u.State = stateName(st.GetState())
	u.Reason = st.GetReason()
	u.QueuedAt = st.GetQueuedAt().AsTime()
	u.Deadline = st.GetDeadline().AsTime()
	if st.GetClaimedAt() != nil {
		u.ClaimedAt = st.GetClaimedAt().AsTime()
	}
	if st.GetFinishedAt() != nil {
		u.FinishedAt = st.GetFinishedAt().AsTime()
	}
	u.Claimer = st.GetInstanceId()
	if r := st.GetResult(); r != nil && u.State == StateSucceeded {
		u.HasResult = true
		u.ResultInstance = r.GetInstanceId()
		u.ExitCode = int(r.GetExitCode())
		u.Stdout = string(r.GetStdout())
	}
}

// finalStates reads every acknowledged unit's state again, after the run.
func (cs *callers) finalStates(ctx context.Context, units []Unit) error {
	for i := range units {
		u := &units[i]
		if u.WorkID == "" {
			continue
		}
		for turn := 0; ; turn++ {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			client, ready := cs.on(i, turn)
			st, err := client.Get(actx, &automatorv1.GetRequest{WorkId: u.WorkID}, ready)
			cancel()
			if status.Code(err) == codes.NotFound {
				u.FinalState = StateNotFound
				break
			}
			if err == nil {
				u.FinalState = stateName(st.GetState())
				break
			}
			if !retryable(err) || ctx.Err() != nil {
				return fmt.Errorf("reading the final state of %s: %w", u.WorkID, err)
			}
			pause(ctx, 50*time.Millisecond)
		}
	}
	return nil
}

func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// pause waits a retry's delay (not a synchronisation: the other side gives
// no signal while it is unreachable).
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
