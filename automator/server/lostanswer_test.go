package server_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// pollNumbered polls once as poll seq of a run, saying that the answers
// from lostFrom on never arrived (0: none), and waiting up to wait.
func pollNumbered(ctx context.Context, px automatorv1.ProxyServiceClient, instance, run string, seq, lostFrom uint64, max int32, wait time.Duration) (*automatorv1.PollResponse, error) {
	return px.Poll(ctx, &automatorv1.PollRequest{InstanceId: instance, RunId: run, PollSeq: seq, LostFrom: lostFrom, MaxUnits: max, Wait: durationpb.New(wait)})
}

// undeliveredCount counts the units failed as never delivered.
type undeliveredCount struct{ n atomic.Int32 }

func (*undeliveredCount) WorkQueued(string)                 {}
func (*undeliveredCount) WorkClaimed(string, time.Duration) {}
func (*undeliveredCount) WorkFinished(store.Work)           {}
func (u *undeliveredCount) WorkUndelivered(string)          { u.n.Add(1) }
func (*undeliveredCount) PollOpened(string) func()          { return func() {} }

const lostReason = "its claim never reached instance a: the answers of the polls it was claimed for never reached the proxy " +
	"(its connection died unseen, or they came too late); the script did not run"

// TestAPollSayingItsRunsEarlierAnswersWereLostFailsTheirUnits: a proxy
// whose polls failed on its side (the connection died unseen, the answer
// came too late) never received the units claimed for them. Its next poll
// says from which poll on it read no answer (lost_from), and the units still
// claimed for those polls of its run fail at once, long before their
// deadline, saying the script did not run; those of polls it read, of its
// other runs and of other instances stay claimed.
func TestAPollSayingItsRunsEarlierAnswersWereLostFailsTheirUnits(t *testing.T) {
	t.Parallel()
	counted := &undeliveredCount{}
	e := newEnv(t, envOptions{pollWindow: time.Hour, metrics: counted})
	api, px := e.callerClient(), e.proxyClient()
	claimFor := func(instance, run string, seq uint64) *automatorv1.Claim {
		t.Helper()
		u := submit(t, api, e.account, time.Hour) // no poll waits: queued
		resp, err := pollNumbered(t.Context(), px, instance, run, seq, 0, 1, 0)
		if err != nil || len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != u.GetWorkId() {
			t.Fatalf("poll %d of %s/%s: %v, %v; want the unit %s", seq, instance, run, resp, err, u.GetWorkId())
		}
		return resp.GetClaims()[0]
	}
	read := claimFor("a", "run-1", 1)
	lost := []*automatorv1.Claim{claimFor("a", "run-1", 2), claimFor("a", "run-1", 3)}
	kept := []*automatorv1.Claim{read, claimFor("a", "run-2", 2), claimFor("b", "run-1", 2)}

	resp, err := pollNumbered(t.Context(), px, "a", "run-1", 4, 2, 1, 0)
	if err != nil || len(resp.GetClaims()) != 0 {
		t.Fatalf("poll 4, saying the answers of 2 and 3 were lost: %v, %v; want an empty answer", resp, err)
	}
	for _, c := range lost {
		st, err := api.Get(t.Context(), &automatorv1.GetRequest{WorkId: c.GetWorkId()})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetState() != automatorv1.State_STATE_FAILED || st.GetReason() != lostReason {
			t.Errorf("unit %s, claimed for a lost answer: %v (%q); want failed (%q)", c.GetWorkId(), st.GetState(), st.GetReason(), lostReason)
		}
	}
	if n := counted.n.Load(); n != 2 {
		t.Errorf("%d units counted as never delivered (automator_work_undelivered_total), want 2", n)
	}
	for _, c := range kept {
		st, err := api.Get(t.Context(), &automatorv1.GetRequest{WorkId: c.GetWorkId()})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetState() != automatorv1.State_STATE_CLAIMED {
			t.Errorf("unit %s, claimed for an answer read, another run or another instance: %v (%q); want still claimed", c.GetWorkId(), st.GetState(), st.GetReason())
		}
	}
	// The proxy said it: the audit record names its account.
	events, err := e.store.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var last store.AuditEvent
	for _, ev := range events {
		if ev.WorkID == lost[0].GetWorkId() {
			last = ev
		}
	}
	if last.Kind != store.AuditWorkEnded || last.Outcome != string(store.StateFailed) || last.Actor != "account:"+e.account || !strings.HasPrefix(last.Detail, "never delivered: ") {
		t.Errorf("the unit's last audit record: %+v; want its end, failed, by the proxy's account, never delivered", last)
	}
	// A result for a failed unit is refused; the others complete as usual.
	_, err = px.Complete(t.Context(), &automatorv1.CompleteRequest{
		WorkId: lost[0].GetWorkId(), ClaimId: lost[0].GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(lost[0].GetWorkId(), &automatorv1.Result{}),
	})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a result for a unit failed as never delivered: %v, want FailedPrecondition", err)
	}
	e.completeClaim(px, "a", read)
}

// TestLostFromMustNameEarlierPollsOfARun: lost_from names polls before this
// one of the same run; anything else is refused in one line.
func TestLostFromMustNameEarlierPollsOfARun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour})
	px := e.proxyClient()
	for _, c := range []struct {
		run           string
		seq, lostFrom uint64
	}{{"run-1", 3, 3}, {"run-1", 3, 4}, {"run-1", 0, 1}, {"", 3, 1}} {
		_, err := pollNumbered(t.Context(), px, "a", c.run, c.seq, c.lostFrom, 1, 0)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "lost_from") {
			t.Errorf("run %q, poll_seq %d, lost_from %d: %v; want InvalidArgument naming lost_from", c.run, c.seq, c.lostFrom, err)
		}
	}
}

// claimHeldAfterLook holds the first claim before it reaches the store
// until the test releases it, and says when a look for the units of lost
// answers has been made.
type claimHeldAfterLook struct {
	store.Store
	once             sync.Once
	entered, release chan struct{}
	looked           chan struct{}
}

func (g *claimHeldAfterLook) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Store.WorkClaim(ctx, p)
}

func (g *claimHeldAfterLook) WorkClaimedByPolls(ctx context.Context, p store.WorkClaimedByPollsParams) ([]store.Work, error) {
	ws, err := g.Store.WorkClaimedByPolls(ctx, p)
	g.looked <- struct{}{}
	return ws, err
}

// TestAPollSupersededWhileItClaimsFailsWhatItClaimed: a newer poll of the
// same run comes while an older one's claim is under way (the proxy gave the
// older one up), and looks for the units of the answers it lost before that
// claim is stored. The older poll then fails what it claimed, rather than
// send it in an answer that no one reads.
func TestAPollSupersededWhileItClaimsFailsWhatItClaimed(t *testing.T) {
	t.Parallel()
	g := &claimHeldAfterLook{entered: make(chan struct{}, 1), release: make(chan struct{}), looked: make(chan struct{}, 1)}
	e := newEnv(t, envOptions{pollWindow: time.Hour, wrap: func(st store.Store) store.Store { g.Store = st; return g }})
	api := e.callerClient()
	u := submit(t, api, e.account, time.Hour) // no poll waits: queued

	older := make(chan pollResult, 1)
	go func() {
		resp, err := pollNumbered(t.Context(), e.proxyClient(), "a", "run-1", 1, 0, 1, time.Minute)
		older <- pollResult{resp, err}
	}()
	waittest.Recv(t, g.entered, "the older poll's claim to begin")
	// A poll for no units, as a proxy whose slots are all busy sends.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go pollNumbered(ctx, e.proxyClient(), "a", "run-1", 2, 1, 0, time.Minute)
	waittest.Recv(t, g.looked, "the newer poll to look for the units of its lost answers")
	close(g.release)

	r := waittest.Recv(t, older, "the superseded poll to end")
	if r.err != nil || len(r.resp.GetClaims()) != 0 {
		t.Errorf("the superseded poll: %v, %v; want an empty answer", r.resp, r.err)
	}
	st, err := api.Get(t.Context(), &automatorv1.GetRequest{WorkId: u.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	want := "its claim never reached instance a: a newer poll of its proxy process came while it was being claimed; the script did not run"
	if st.GetState() != automatorv1.State_STATE_FAILED || st.GetReason() != want {
		t.Errorf("the unit the superseded poll claimed: %v (%q); want failed (%q)", st.GetState(), st.GetReason(), want)
	}
}

// TestALostClaimAnotherReplicaMakesAfterTheLookFailsToo: with replicas, the
// one holding the proxy's dead poll may claim a unit for it after the
// proxy's next poll, on another replica, looked for the units of its lost
// answers: it hears of that poll only when its announcement arrives. The
// replica that took the poll looks once more a little later, and the unit
// fails too.
func TestALostClaimAnotherReplicaMakesAfterTheLookFailsToo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour, broadcaster: newRecordingBroadcaster()})
	st := e.lostClaimAfterTheLook()
	if st.GetState() != automatorv1.State_STATE_FAILED || !strings.HasSuffix(st.GetReason(), "; the script did not run") {
		t.Errorf("the unit claimed for the lost poll after the look: %v (%q); want failed, not run", st.GetState(), st.GetReason())
	}
}

// lostClaimAfterTheLook has the proxy's poll 2 say that poll 1's answer was
// lost, then stores a unit as poll 1's claim, as another replica that has
// not heard of poll 2 yet would, and returns the unit once it has ended.
func (e *env) lostClaimAfterTheLook() *automatorv1.WorkStatus {
	t := e.t
	t.Helper()
	if _, err := pollNumbered(t.Context(), e.proxyClient(), "a", "run-1", 2, 1, 1, 0); err != nil {
		t.Fatal(err)
	}
	claimed, err := e.store.WorkEnqueue(t.Context(), store.WorkEnqueueParams{
		ID: store.NewWorkID(time.Now()), Account: e.account, KeyID: 1, SealedCommand: []byte("sealed elsewhere"),
		Now: time.Now(), Deadline: time.Now().Add(time.Hour),
		ClaimFor: &store.ClaimRef{InstanceID: "a", ClaimID: "c-late", ClaimPoll: store.ClaimPoll{Run: "run-1", Poll: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.callerClient().Wait(waittest.Context(t, "the unit claimed for the lost poll after the look to end"), &automatorv1.WaitRequest{WorkId: claimed.ID})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestALostClaimFailedByTheSecondLookIsAuditedAsTheProxysAccount: the unit
// that the second look (with replicas, lostLookAgain after the proxy's poll)
// fails was failed on the proxy's word, as those of the first look are: its
// audit record names the proxy's account, and where the poll came from.
func TestALostClaimFailedByTheSecondLookIsAuditedAsTheProxysAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour, broadcaster: newRecordingBroadcaster()})
	st := e.lostClaimAfterTheLook()
	if st.GetState() != automatorv1.State_STATE_FAILED {
		t.Fatalf("the unit claimed for the lost poll after the look: %v (%q); want failed", st.GetState(), st.GetReason())
	}
	var last store.AuditEvent
	for _, ev := range e.auditLog() {
		if ev.WorkID == st.GetWorkId() {
			last = ev
		}
	}
	if last.Kind != store.AuditWorkEnded || last.Actor != "account:"+e.account || last.Source != "127.0.0.1" || !strings.HasPrefix(last.Detail, "never delivered: ") {
		t.Errorf("the unit's last audit record: %+v; want its end, never delivered, by the proxy's account from 127.0.0.1", last)
	}
}
