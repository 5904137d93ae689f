package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
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
	t.Parallel()
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
	t.Parallel()
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

// recordingBroadcaster is a Broadcaster for one replica whose peers are
// played by the test: it records what is published and delivers what the
// test sends as the others' events.
type recordingBroadcaster struct {
	published chan server.Event
	incoming  chan server.Event
}

func newRecordingBroadcaster() *recordingBroadcaster {
	return &recordingBroadcaster{published: make(chan server.Event, 64), incoming: make(chan server.Event)}
}

func (b *recordingBroadcaster) Publish(_ context.Context, e server.Event) error {
	b.published <- e
	return nil
}

func (b *recordingBroadcaster) Listen(ctx context.Context, fn func(server.Event)) error {
	for {
		select {
		case e := <-b.incoming:
			fn(e)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestARunsFirstPollOnAConnectionIsAnnouncedToTheOtherReplicas: with other
// replicas sharing the queue, a run's first poll on a connection tells them
// (they may hold one of its polls on a connection that died unseen), and
// its later polls on that connection do not; one of another run, or of the
// same run on a new connection, does.
func TestARunsFirstPollOnAConnectionIsAnnouncedToTheOtherReplicas(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	e := newEnv(t, envOptions{pollWindow: time.Hour, broadcaster: b})
	px := e.proxyClient()
	quick := func(px automatorv1.ProxyServiceClient, run string) {
		t.Helper()
		if _, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "host-a", RunId: run, MaxUnits: 1, Wait: durationpb.New(0)}); err != nil {
			t.Fatal(err)
		}
	}
	announced := func() []string {
		var runs []string
		for {
			select {
			case ev := <-b.published:
				if ev.Kind == server.EventRunPolled {
					runs = append(runs, ev.InstanceID+"/"+ev.RunID)
				}
			default:
				return runs
			}
		}
	}
	quick(px, "run-1")
	waittest.Until(t, "the first poll to be announced", func() bool { return len(b.published) > 0 })
	if got := announced(); len(got) != 1 || got[0] != "host-a/run-1" {
		t.Fatalf("announced %v after the first poll; want host-a/run-1", got)
	}
	quick(px, "run-1")
	quick(px, "run-1")
	quick(px, "run-2")
	quick(e.proxyClient(), "run-1") // a new connection
	waittest.Until(t, "the polls on new connections to be announced", func() bool { return len(b.published) >= 2 })
	if got := announced(); len(got) != 2 || got[0] != "host-a/run-2" || got[1] != "host-a/run-1" {
		t.Errorf("announced %v after two more polls of run-1 on its connection, one of run-2 and one of run-1 on a new connection; want host-a/run-2 and host-a/run-1", got)
	}
}

// TestAnotherReplicasAnnouncementSupersedesTheRunsWaitingPoll: told that a
// run polled another replica on a new connection, this replica ends its
// waiting poll of that run, and only that one.
func TestAnotherReplicasAnnouncementSupersedesTheRunsWaitingPoll(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	e := newEnv(t, envOptions{pollWindow: time.Hour, broadcaster: b})
	held := e.pollRunAsync(t.Context(), "host-a", "run-1")
	other := e.pollRunAsync(t.Context(), "host-a", "run-2")
	e.awaitWaiting(2)
	b.incoming <- server.Event{Kind: server.EventRunPolled, Account: e.account, InstanceID: "host-a", RunID: "run-1"}
	r := waittest.Recv(t, held, "the poll of the run announced elsewhere to end")
	if r.err != nil || len(r.resp.GetClaims()) != 0 {
		t.Errorf("the poll of the run announced elsewhere: %v, %v; want an empty answer", r.resp, r.err)
	}
	e.awaitWaiting(1)
	select {
	case r := <-other:
		t.Errorf("the poll of another run ended: %v, %v; want it still waiting", r.resp, r.err)
	default:
	}
}

// TestAStalePollRegisteredLateSupersedesNothing: polls of a run need not
// reach their handlers in the order they were sent (a poll the proxy dropped
// may come after the one it sent next). Numbered, a poll older than the
// run's waiting one ends at once, and the waiting one stays and is handed
// the next unit; an announcement from another replica of an older poll of
// the run does not end it either, one of a newer poll does.
func TestAStalePollRegisteredLateSupersedesNothing(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	e := newEnv(t, envOptions{pollWindow: time.Hour, broadcaster: b})
	newer := make(chan pollResult, 1)
	go func() {
		resp, err := pollNumbered(t.Context(), e.proxyClient(), "host-a", "run-1", 5, 0, 1, time.Minute)
		newer <- pollResult{resp, err}
	}()
	e.awaitWaiting(1)
	resp, err := pollNumbered(t.Context(), e.proxyClient(), "host-a", "run-1", 4, 0, 0, time.Minute)
	if err != nil || len(resp.GetClaims()) != 0 {
		t.Errorf("the stale poll: %v, %v; want an empty answer at once", resp, err)
	}
	b.incoming <- server.Event{Kind: server.EventRunPolled, Account: e.account, InstanceID: "host-a", RunID: "run-1", PollSeq: 4}
	b.incoming <- server.Event{Kind: server.EventWorkQueued, Account: "nobody"} // taken once the one before was applied
	st := submit(t, e.callerClient(), e.account, time.Hour)
	r := waittest.Recv(t, newer, "the newer poll to be handed the unit")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("the newer poll: %v, %v; want the unit %s", r.resp, r.err, st.GetWorkId())
	}

	waiting := make(chan pollResult, 1)
	go func() {
		resp, err := pollNumbered(t.Context(), e.proxyClient(), "host-a", "run-1", 6, 0, 1, time.Minute)
		waiting <- pollResult{resp, err}
	}()
	e.awaitWaiting(1)
	b.incoming <- server.Event{Kind: server.EventRunPolled, Account: e.account, InstanceID: "host-a", RunID: "run-1", PollSeq: 7}
	r = waittest.Recv(t, waiting, "the poll superseded by a newer one on another replica to end")
	if r.err != nil || len(r.resp.GetClaims()) != 0 {
		t.Errorf("the poll superseded by a newer one on another replica: %v, %v; want an empty answer", r.resp, r.err)
	}
}

// TestAPollOlderThanOneHeardOfEarlierEndsAtOnce: a poll of a run may reach
// this replica only after a newer poll of the run was heard of, and ended:
// answered here, or announced by another replica before the stale poll
// registered. It is stale all the same: it ends at once with nothing
// instead of holding, for its whole window, a poll whose connection is
// dead; a newer poll of the run still waits.
func TestAPollOlderThanOneHeardOfEarlierEndsAtOnce(t *testing.T) {
	t.Parallel()
	b := newRecordingBroadcaster()
	e := newEnv(t, envOptions{pollWindow: time.Hour, broadcaster: b})
	px := e.proxyClient()
	if resp, err := pollNumbered(t.Context(), px, "host-a", "run-1", 5, 0, 1, 0); err != nil || len(resp.GetClaims()) != 0 {
		t.Fatalf("poll 5: %v, %v; want an empty answer", resp, err)
	}
	b.incoming <- server.Event{Kind: server.EventRunPolled, Account: e.account, InstanceID: "host-a", RunID: "run-2", PollSeq: 3}
	b.incoming <- server.Event{Kind: server.EventWorkQueued, Account: "nobody"} // taken once the one before was applied
	ctx, cancel := context.WithTimeout(t.Context(), waittest.Bound)
	defer cancel()
	for _, p := range []struct {
		run string
		seq uint64
	}{{"run-1", 4}, {"run-1", 5}, {"run-2", 2}, {"run-2", 3}} {
		resp, err := pollNumbered(ctx, px, "host-a", p.run, p.seq, 0, 1, time.Hour)
		if err != nil || len(resp.GetClaims()) != 0 {
			t.Errorf("stale poll %d of %s: %v, %v; want an empty answer at once", p.seq, p.run, resp, err)
		}
	}
	newer := make(chan pollResult, 1)
	go func() {
		resp, err := pollNumbered(t.Context(), e.proxyClient(), "host-a", "run-2", 4, 0, 1, time.Minute)
		newer <- pollResult{resp, err}
	}()
	e.awaitWaiting(1)
	st := submit(t, e.callerClient(), e.account, time.Hour)
	r := waittest.Recv(t, newer, "the newer poll to be handed the unit")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Errorf("the newer poll: %v, %v; want the unit %s", r.resp, r.err, st.GetWorkId())
	}
}
