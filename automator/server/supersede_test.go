package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// pollRunAsync polls as one run of instance, on its own connection, in the
// background.
func (e *env) pollRunAsync(ctx context.Context, instance, run string) <-chan pollResult {
	px := e.proxyClient() // a connection of its own
	out := make(chan pollResult, 1)
	go func() {
		resp, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: instance, RunId: run, MaxUnits: 1, Wait: durationpb.New(time.Minute)})
		out <- pollResult{resp, err}
	}()
	return out
}

// TestNewerPollOfTheSameRunSupersedesAWaitingOne: a proxy process polls one
// poll at a time, so when a poll comes with the instance id and run id of
// one still waiting, the older one's connection died unseen (a middlebox
// forgot it, say: its client gave up, and the automator heard nothing).
// Units queued from then on go to the new poll, not to the dead one, which
// ends with nothing; without it they would be stored as the dead poll's
// claims and time out.
func TestNewerPollOfTheSameRunSupersedesAWaitingOne(t *testing.T) {
	e := newEnv(t, envOptions{pollWindow: time.Hour})
	caller := e.callerClient()
	dead := e.pollRunAsync(t.Context(), "host-a", "run-1")
	e.awaitWaiting(1)
	live := e.pollRunAsync(t.Context(), "host-a", "run-1")

	r := waittest.Recv(t, dead, "the superseded poll to end")
	if r.err != nil || len(r.resp.GetClaims()) != 0 {
		t.Errorf("the superseded poll: %v, %v; want an empty answer", r.resp, r.err)
	}
	e.awaitWaiting(1)
	st := submit(t, caller, e.account, time.Hour)
	r = waittest.Recv(t, live, "the newer poll to be handed the unit")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Errorf("the newer poll: %v, %v; want the unit %s", r.resp, r.err, st.GetWorkId())
	}
}

// TestPollsOfOtherRunsOrWithoutRunIDsAreNotSuperseded: two processes that
// share an instance id (hosts of the same name) have different run ids, and
// a proxy predating run ids sends none: their polls wait side by side, and
// a unit goes to the oldest as usual.
func TestPollsOfOtherRunsOrWithoutRunIDsAreNotSuperseded(t *testing.T) {
	for _, runs := range [][2]string{{"run-1", "run-2"}, {"", ""}} {
		t.Run(runs[0]+"+"+runs[1], func(t *testing.T) {
			e := newEnv(t, envOptions{pollWindow: time.Hour})
			caller := e.callerClient()
			first := e.pollRunAsync(t.Context(), "host-a", runs[0])
			e.awaitWaiting(1)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			second := e.pollRunAsync(ctx, "host-a", runs[1])
			e.awaitWaiting(2)
			st := submit(t, caller, e.account, time.Hour)
			r := waittest.Recv(t, first, "the oldest poll to be handed the unit")
			if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
				t.Errorf("the oldest poll: %v, %v; want the unit %s", r.resp, r.err, st.GetWorkId())
			}
			select {
			case r := <-second:
				t.Errorf("the second poll ended: %v, %v; want it still waiting", r.resp, r.err)
			default:
			}
			if n := e.srv.WaitingPolls(e.account); n != 1 {
				t.Errorf("%d polls waiting; want the second one", n)
			}
		})
	}
}
