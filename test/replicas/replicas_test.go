//go:build linux

package replicas

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// execute is one caller's call: its input, the replica it called, the unit
// and what came back.
type execute struct {
	input    string
	replica  int // where it was submitted
	finished int // where its result came from
	workID   string
	st       *automatorv1.WorkStatus
	err      error
	took     time.Duration // from the call to its result
}

func request(input, runs, sleep string) *automatorv1.ExecuteRequest {
	args := []string{input, runs}
	if sleep != "" {
		args = append(args, sleep)
	}
	return &automatorv1.ExecuteRequest{
		Account: "acme",
		Command: &automatorv1.Command{Script: "record.sh", Args: args},
		Timeout: durationpb.New(time.Minute),
	}
}

// check reports a call that did not end as a success printing its input.
func (e execute) check() error {
	switch {
	case e.err != nil:
		return fmt.Errorf("input %s via r%d: %v", e.input, e.replica, e.err)
	case e.st.GetState() != automatorv1.State_STATE_SUCCEEDED:
		return fmt.Errorf("input %s via r%d: unit %s ended %s (%s)", e.input, e.replica, e.st.GetWorkId(), e.st.GetState(), e.st.GetReason())
	case e.st.GetResult().GetExitCode() != 0 || string(e.st.GetResult().GetStdout()) != e.input+"\n":
		return fmt.Errorf("input %s via r%d: exit %d, stdout %q", e.input, e.replica, e.st.GetResult().GetExitCode(), e.st.GetResult().GetStdout())
	}
	return nil
}

// waitAnywhere waits for unit id on replica prefer and, while a replica is
// unavailable (dead), on the next one: what a caller whose replica died
// does. It returns the status and the replica that gave it.
func waitAnywhere(ctx context.Context, clients []automatorv1.AutomatorServiceClient, prefer int, id string) (*automatorv1.WorkStatus, int, error) {
	for attempt := 0; ; attempt++ {
		r := (prefer + attempt) % len(clients)
		st, err := clients[r].Wait(ctx, &automatorv1.WaitRequest{WorkId: id})
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return st, r, err
		}
		if attempt%len(clients) == len(clients)-1 {
			// Every replica refused: back off a little before the next round.
			select {
			case <-ctx.Done():
				return nil, r, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// TestThreeReplicasRunEveryUnitExactlyOnceAndSurviveAKill is issue 7's
// acceptance test. Three automator replicas share one PostgreSQL schema;
// two proxy instances of one account poll replicas r0 and r1 (nobody polls
// r2); callers are spread over all three.
//
// Part one: 2,000 units via the gRPC API (ExecuteOnProxy, which waits on
// the replica that queued the unit) and one `automator exec` per replica:
// each unit runs exactly once, and each caller gets its own unit's output,
// the r2 callers included, although every result of theirs is posted to
// another replica.
//
// Part two: callers queue units on r2 and wait there, others keep calling
// r0 and r1; r2 is killed with SIGKILL. Its callers wait by id on another
// replica and get their results: nothing is lost, nothing runs twice.
func TestThreeReplicasRunEveryUnitExactlyOnceAndSurviveAKill(t *testing.T) {
	const (
		bulk         = 2000
		bulkCallers  = 30 // ten per replica
		victimUnits  = 120
		otherUnits   = 120
		slowCallers  = 24
		instanceSlot = "max_concurrency: 8"
		// maxCallTime is far above a loaded machine's call (well under a
		// second) and far below the unit's 60s deadline.
		maxCallTime = 20 * time.Second
	)
	started := time.Now()
	c := newCluster(t, pgtest.DSN(t), 3)
	c.Start(t)
	profile := c.createAccount(t, "acme")
	scripts := t.TempDir()
	runs := filepath.Join(t.TempDir(), "runs.log")
	// One short line per run, appended before anything else: an O_APPEND
	// write of it is atomic. An optional third argument sleeps.
	writeScript(t, scripts, "record.sh", `echo "$PROXY_WORK_ID $PROXY_INSTANCE_ID $1" >> "$2"
if [ -n "$3" ]; then sleep "$3"; fi
echo "$1"`)
	startProxy(t, proxyConfig(t, profile, c.Replicas[0], instanceSlot), scripts, "pa")
	startProxy(t, proxyConfig(t, profile, c.Replicas[1], instanceSlot), scripts, "pb")
	clients := c.callers(t)
	t.Logf("3 replicas and 2 proxies up in %v", time.Since(started).Round(time.Millisecond))

	// Every replica is listed, alive.
	code, out, errOut := run(bin.automator, "replicas", "--data-dir", c.Replicas[2].DataDir)
	if code != 0 {
		t.Fatalf("automator replicas: exit %d: %s", code, errOut)
	}
	for _, r := range c.Replicas {
		if !hasRow(out, r.ID, "yes") {
			t.Errorf("automator replicas does not list %s as alive:\n%s", r.ID, out)
		}
	}

	// ---- part one: 2,000 units over three replicas ----
	start := time.Now()
	bulkResults := make([]execute, bulk)
	next := make(chan int)
	var wg sync.WaitGroup
	for g := range bulkCallers {
		r := g % len(clients)
		wg.Go(func() {
			for i := range next {
				input := strconv.Itoa(i)
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				began := time.Now()
				st, err := clients[r].ExecuteOnProxy(ctx, request(input, runs, ""))
				cancel()
				bulkResults[i] = execute{input: input, replica: r, finished: r, workID: st.GetWorkId(), st: st, err: err, took: time.Since(began)}
			}
		})
	}
	// And the shell's executeOnProxy, once per replica.
	execOut := make([]string, len(c.Replicas))
	execErr := make([]string, len(c.Replicas))
	execCode := make([]int, len(c.Replicas))
	for i, r := range c.Replicas {
		wg.Go(func() {
			execCode[i], execOut[i], execErr[i] = run(bin.automator, "exec", "--data-dir", r.DataDir,
				"--account", "acme", "--timeout", "60s", "record.sh", "exec-"+r.ID, runs)
		})
	}
	for i := range bulk {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("part one: %d units from %d callers over 3 replicas took %v", bulk, bulkCallers, time.Since(start).Round(time.Millisecond))
	bad := 0
	for _, e := range bulkResults {
		if err := e.check(); err != nil {
			if bad++; bad <= 10 {
				t.Error(err)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d calls failed in all", bad)
	}
	// Wake-ups cross replicas: a unit queued on r2 wakes a poll on r0 or r1,
	// and its result wakes the caller waiting on r2, at once. Without them
	// an r2 caller would wait for a poll window or the 60s deadline.
	var slowest time.Duration
	for _, e := range bulkResults {
		slowest = max(slowest, e.took)
	}
	if slowest > maxCallTime {
		t.Errorf("the slowest call took %v, more than %v: a wake-up between replicas was missed", slowest, maxCallTime)
	}
	t.Logf("slowest call: %v", slowest.Round(time.Millisecond))
	for i, r := range c.Replicas {
		if execCode[i] != 0 || execOut[i] != "exec-"+r.ID+"\n" {
			t.Errorf("automator exec --data-dir %s: exit %d, stdout %q, stderr %q", r.ID, execCode[i], execOut[i], execErr[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// ---- part two: r2 dies while its callers wait ----
	const victim = 2
	start = time.Now()
	victimResults := make([]execute, victimUnits)
	otherResults := make([]execute, otherUnits)
	// Others keep calling r0 and r1 throughout.
	var others sync.WaitGroup
	nextOther := make(chan int, otherUnits)
	for i := range otherUnits {
		nextOther <- i
	}
	close(nextOther)
	for g := range slowCallers {
		r := g % 2
		others.Go(func() {
			for i := range nextOther {
				input := "other-" + strconv.Itoa(i)
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				st, err := clients[r].ExecuteOnProxy(ctx, request(input, runs, "0.2"))
				cancel()
				otherResults[i] = execute{input: input, replica: r, finished: r, workID: st.GetWorkId(), st: st, err: err}
			}
		})
	}
	// r2's callers queue their units there (each acknowledged with its id)
	// and wait there.
	var submitted, waiting sync.WaitGroup
	var finishedBeforeKill atomic.Int32
	killed := make(chan struct{})
	someFinished := make(chan struct{})
	const finishedFirst = 10
	for i := range victimUnits {
		submitted.Add(1)
		waiting.Add(1)
		go func() {
			defer waiting.Done()
			input := "victim-" + strconv.Itoa(i)
			e := execute{input: input, replica: victim}
			st, err := clients[victim].Submit(t.Context(), request(input, runs, "0.2"))
			submitted.Done()
			if err != nil {
				e.err = fmt.Errorf("submitting: %w", err)
				victimResults[i] = e
				return
			}
			e.workID = st.GetWorkId()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			e.st, e.finished, e.err = waitAnywhere(ctx, clients, victim, e.workID)
			select {
			case <-killed:
			default:
				if e.err == nil && finishedBeforeKill.Add(1) == finishedFirst {
					close(someFinished)
				}
			}
			victimResults[i] = e
		}()
	}
	submitted.Wait()
	// Kill it once a few of its callers have their results (posted to r0
	// and r1, delivered on r2), while the rest wait: queued, or claimed.
	select {
	case <-someFinished:
	case <-time.After(time.Minute):
		t.Fatal("no caller of r2 got a result within a minute")
	}
	c.Replicas[victim].proc.Kill(t)
	close(killed)
	t.Logf("killed r2 after its callers queued %d units; %d had their result by then", victimUnits, finishedBeforeKill.Load())
	waiting.Wait()
	others.Wait()
	t.Logf("part two took %v", time.Since(start).Round(time.Millisecond))

	failedOver := 0
	for _, e := range victimResults {
		if err := e.check(); err != nil {
			t.Error(err)
		}
		if e.finished != victim {
			failedOver++
		}
	}
	for _, e := range otherResults {
		if err := e.check(); err != nil {
			t.Error(err)
		}
	}
	if failedOver == 0 {
		t.Errorf("no caller of r2 had to wait on another replica: the kill came too late to test anything")
	}
	t.Logf("%d of r2's %d callers got their result from another replica after the kill", failedOver, victimUnits)

	// ---- every unit ran exactly once ----
	want := map[string]string{} // work id → input
	for _, set := range [][]execute{bulkResults, victimResults, otherResults} {
		for _, e := range set {
			want[e.workID] = e.input
		}
	}
	ranByInput := map[string]int{}
	ranByWork := map[string]int{}
	byInstance := map[string]int{}
	log := lines(runs)
	for _, l := range log {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Errorf("malformed run log line %q", l)
			continue
		}
		ranByWork[f[0]]++
		byInstance[f[1]]++
		ranByInput[f[2]]++
		if in, ok := want[f[0]]; ok && in != f[2] {
			t.Errorf("unit %s ran with input %s, its caller sent %s", f[0], f[2], in)
		}
	}
	wantRuns := bulk + len(c.Replicas) + victimUnits + otherUnits
	if len(log) != wantRuns {
		t.Errorf("the run log has %d lines, want %d: one per unit", len(log), wantRuns)
	}
	twice := 0
	for id, n := range ranByWork {
		if n != 1 {
			if twice++; twice <= 10 {
				t.Errorf("unit %s ran %d times", id, n)
			}
		}
	}
	for id, in := range want {
		if ranByWork[id] != 1 {
			t.Errorf("unit %s (input %s) ran %d times, want once", id, in, ranByWork[id])
		}
	}
	for _, r := range c.Replicas {
		if n := ranByInput["exec-"+r.ID]; n != 1 {
			t.Errorf("automator exec via %s ran %d times, want once", r.ID, n)
		}
	}
	if byInstance["pa"] == 0 || byInstance["pb"] == 0 || len(byInstance) != 2 {
		t.Errorf("runs per instance %v: want both pa and pb, and nobody else", byInstance)
	}
	t.Logf("runs per instance: %v; whole test %v", byInstance, time.Since(started).Round(time.Millisecond))
}

// hasRow reports whether a table printed by `automator replicas` has a row
// starting with id and ending with last.
func hasRow(table, id, last string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == id && f[len(f)-1] == last {
			return true
		}
	}
	return false
}
