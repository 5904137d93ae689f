package storetest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var endOpenCases = []testCase{
	{"WorkEndOpenTimesOutEveryOpenUnitWhateverItsDeadline", testWorkEndOpen},
	{"WorkEndOpenRespectsMax", testWorkEndOpenRespectsMax},
}

// testWorkEndOpen: after a restore every unit that was open in the backup
// ends timed_out, however far its deadline, with an audit record each;
// none can be claimed or completed afterwards, and ended units keep their
// outcome.
func testWorkEndOpen(f *fixture) {
	f.account("acme")
	f.account("beta")
	f.enqueue("done", "acme", at(0), at(time.Hour))
	done := f.complete(f.claimOne("acme", "host-a", "done", at(time.Second)), at(2*time.Second))
	f.enqueue("cancelled", "acme", at(time.Second), at(time.Hour))
	cancelled, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "cancelled", Reason: "caller cancelled", Now: at(2 * time.Second)})
	if err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}
	f.enqueue("claimed", "acme", at(3*time.Second), at(time.Hour))
	claimed := f.claimOne("acme", "host-b", "claimed", at(4*time.Second))
	queued := f.enqueue("queued", "acme", at(5*time.Second), at(time.Hour))
	handed := f.enqueueFor("handed", "beta", at(6*time.Second), at(2*time.Hour), &store.ClaimRef{InstanceID: "host-c", ClaimID: "c-1"})
	audited := f.auditLen()

	now := at(time.Minute) // before every deadline
	got, err := f.s.WorkEndOpen(f.ctx, store.WorkEndOpenParams{Reason: "ended by a test", Now: now,
		Audit: &store.AuditEvent{At: now, Kind: store.AuditWorkEnded, Actor: "cli:test", Detail: "restore"}})
	if err != nil {
		f.t.Fatalf("WorkEndOpen: %v", err)
	}
	if !slices.Equal(ids(got), []string{"claimed", "queued", "handed"}) {
		f.t.Fatalf("WorkEndOpen changed %v, want [claimed queued handed], oldest first", ids(got))
	}
	for i, before := range []store.Work{claimed, queued, handed} {
		want := before
		want.State = store.StateTimedOut
		want.FinishedAt = now
		want.Reason = store.EndOpenReason("ended by a test", before)
		f.wantWork("WorkGet after WorkEndOpen", f.get(before.ID), want)
		want.SealedCommand = nil // left out of what WorkEndOpen returns
		f.wantWork("WorkEndOpen", got[i], want)
	}
	if r := got[0].Reason; !strings.HasPrefix(r, "ended by a test") || !strings.Contains(r, "host-b") {
		f.t.Errorf("reason of the claimed unit = %q, want the given reason and its claimer host-b", r)
	}
	f.wantWork("WorkGet of a unit that had succeeded", f.get("done"), done)
	f.wantWork("WorkGet of a unit that had been cancelled", f.get("cancelled"), cancelled)

	// Nothing is handed out again, and the claimer's late result is refused.
	if ws := f.claim("acme", "host-d", 5, now); len(ws) != 0 {
		f.t.Errorf("WorkClaim after WorkEndOpen claimed %v, want nothing", ids(ws))
	}
	_, err = f.s.WorkComplete(f.ctx, store.WorkCompleteParams{ID: "claimed", ClaimID: claimed.ClaimID, State: store.StateSucceeded, Now: now})
	f.wantErr("WorkComplete of a unit WorkEndOpen ended", err, store.ErrNotClaimable)

	events, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 1000})
	if err != nil {
		f.t.Fatalf("AuditList: %v", err)
	}
	events = events[audited:]
	if len(events) != 3 {
		f.t.Fatalf("WorkEndOpen appended %d audit events, want 3 (one per unit ended)", len(events))
	}
	for i, e := range events {
		w := got[i]
		if e.Kind != store.AuditWorkEnded || e.Actor != "cli:test" || e.Detail != "restore" || e.WorkID != w.ID ||
			e.Account != w.Account || e.InstanceID != w.InstanceID || e.Outcome != string(store.StateTimedOut) || !e.At.Equal(now) {
			f.t.Errorf("audit event %d = %+v, want the template filled in from unit %s (timed_out)", i, e, w.ID)
		}
	}

	again, err := f.s.WorkEndOpen(f.ctx, store.WorkEndOpenParams{Reason: "again", Now: now.Add(time.Second)})
	if err != nil || len(again) != 0 {
		f.t.Errorf("second WorkEndOpen: changed %v, err %v; want nothing", ids(again), err)
	}
}

func testWorkEndOpenRespectsMax(f *fixture) {
	f.account("acme")
	const open = 5
	for i := range open {
		f.enqueue(fmt.Sprintf("w-%d", i), "acme", at(time.Duration(i)*time.Second), at(time.Hour))
	}
	f.claim("acme", "i-1", 2, at(10*time.Second))
	var all []string
	for range open + 1 {
		ws, err := f.s.WorkEndOpen(f.ctx, store.WorkEndOpenParams{Reason: "r", Now: at(time.Minute), Max: 2})
		if err != nil {
			f.t.Fatalf("WorkEndOpen with Max 2: %v", err)
		}
		if len(ws) > 2 {
			f.t.Errorf("WorkEndOpen with Max 2 changed %v", ids(ws))
		}
		if len(ws) == 0 {
			break
		}
		all = append(all, ids(ws)...)
	}
	if !slices.Equal(all, []string{"w-0", "w-1", "w-2", "w-3", "w-4"}) {
		f.t.Errorf("WorkEndOpen with Max 2 until none is left changed %v, want each unit once, oldest first", all)
	}
	for i := range open {
		f.wantState(fmt.Sprintf("w-%d", i), store.StateTimedOut)
	}
}
