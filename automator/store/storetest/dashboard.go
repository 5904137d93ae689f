package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var dashboardCases = []testCase{
	{"DashboardSessionEndIsSeenUntilPurgedPastItsExpiry", testDashboardSessionEnd},
	{"DashboardSessionEndListHasTheSignOutsOfSessionsExpiringAfterACut", testDashboardSessionEndList},
	{"ASignOutAppendsItsAuditEventOnlyWhenItEndsTheSession", testSignOutAppendsAudit},
	{"ASignOutWhoseAuditEventFailsDoesNotEndTheSession", testSignOutWithFailingAudit},
}

func (f *fixture) sessionEnded(id string) bool {
	f.t.Helper()
	ended, err := f.s.DashboardSessionEnded(f.ctx, id)
	if err != nil {
		f.t.Fatalf("DashboardSessionEnded(%q): %v", id, err)
	}
	return ended
}

func (f *fixture) endSession(id string, expires time.Time) {
	f.t.Helper()
	if err := f.s.DashboardSessionEnd(f.ctx, store.DashboardSessionEndParams{ID: id, Expires: expires}); err != nil {
		f.t.Fatalf("DashboardSessionEnd(%q): %v", id, err)
	}
}

func (f *fixture) purgeSessions(before time.Time) int {
	f.t.Helper()
	n, err := f.s.DashboardSessionPurge(f.ctx, store.DashboardSessionPurgeParams{ExpiredBefore: before})
	if err != nil {
		f.t.Fatalf("DashboardSessionPurge(before %v): %v", before, err)
	}
	return n
}

// wantSessionsEnded reports every session whose ended state is not want.
func (f *fixture) wantSessionsEnded(want map[string]bool, when string) {
	f.t.Helper()
	for id, w := range want {
		if got := f.sessionEnded(id); got != w {
			f.t.Errorf("%s: session %q ended = %v, want %v", when, id, got, w)
		}
	}
}

func testDashboardSessionEnd(f *fixture) {
	f.wantSessionsEnded(map[string]bool{"day": false}, "before any sign-out")
	f.endSession("day", at(12*time.Hour))
	f.endSession("Hour", at(time.Hour))
	// Ids compare byte by byte; a session never signed out is not ended.
	f.wantSessionsEnded(map[string]bool{"day": true, "Hour": true, "hour": false, "Day": false, "other": false}, "after two sign-outs")
	// Ending a session again changes nothing: its record keeps its expiry.
	f.endSession("day", at(30*time.Minute))

	// A record goes only once its session expired before the cut.
	if n := f.purgeSessions(at(time.Hour)); n != 0 {
		f.t.Errorf("purging before the earliest expiry deleted %d records, want 0", n)
	}
	if n := f.purgeSessions(at(2 * time.Hour)); n != 1 {
		f.t.Errorf("purging before 2h deleted %d records, want 1 (the session that expired at 1h)", n)
	}
	f.wantSessionsEnded(map[string]bool{"day": true, "Hour": false}, "after purging before 2h")
	if n := f.purgeSessions(at(13 * time.Hour)); n != 1 {
		f.t.Errorf("purging before 13h deleted %d records, want 1", n)
	}
	f.wantSessionsEnded(map[string]bool{"day": false}, "after purging before 13h")
}

// sessionEnds lists the sign-outs of sessions that expire after cut, as
// "id@expiry" (the expiry as a duration since base).
func (f *fixture) sessionEnds(cut time.Time) []string {
	f.t.Helper()
	ends, err := f.s.DashboardSessionEndList(f.ctx, cut)
	if err != nil {
		f.t.Fatalf("DashboardSessionEndList(after %v): %v", cut, err)
	}
	out := []string{}
	for _, e := range ends {
		out = append(out, fmt.Sprintf("%s@%v", e.ID, e.Expires.Sub(base)))
		if e.Expires.Location() != time.UTC {
			f.t.Errorf("sign-out %q expires at %v, not in UTC", e.ID, e.Expires)
		}
	}
	return out
}

func testDashboardSessionEndList(f *fixture) {
	want := func(cut time.Time, when string, ids ...string) {
		f.t.Helper()
		if got := f.sessionEnds(cut); !slices.Equal(got, ids) {
			after := "any time"
			if !cut.IsZero() {
				after = cut.Sub(base).String()
			}
			f.t.Errorf("%s: sign-outs of sessions expiring after %s = %v, want %v", when, after, got, ids)
		}
	}
	want(time.Time{}, "before any sign-out")
	f.endSession("b", at(2*time.Hour))
	f.endSession("a", at(2*time.Hour))
	f.endSession("early", at(time.Hour+time.Microsecond))
	f.endSession("late", at(12*time.Hour))
	f.endSession("a", at(30*time.Minute)) // again: keeps its first expiry

	// By expiry, then id; a zero cut lists them all.
	want(time.Time{}, "after four sign-outs", "early@1h0m0.000001s", "a@2h0m0s", "b@2h0m0s", "late@12h0m0s")
	// Only those expiring after the cut: a session that expired at it is
	// expired.
	want(at(time.Hour+time.Microsecond), "cut at the earliest expiry", "a@2h0m0s", "b@2h0m0s", "late@12h0m0s")
	want(at(time.Hour), "cut a microsecond before it", "early@1h0m0.000001s", "a@2h0m0s", "b@2h0m0s", "late@12h0m0s")
	want(at(12*time.Hour), "cut at the latest expiry")
	// A purged record is no longer listed.
	f.purgeSessions(at(90 * time.Minute))
	want(time.Time{}, "after purging before 90m", "a@2h0m0s", "b@2h0m0s", "late@12h0m0s")
}

// signOutEvent is the audit event of a sign-out of session id.
func signOutEvent(id string) *store.AuditEvent {
	return &store.AuditEvent{At: at(time.Minute), Kind: store.AuditDashboardSignOut, Actor: "apikey:k-1", Source: "browser", Detail: id}
}

// testSignOutAppendsAudit: a sign-out appends its event with the record
// of the session's end; a second sign-out of the same session changes
// nothing, so it appends nothing either.
func testSignOutAppendsAudit(f *fixture) {
	end := func(id string) {
		f.t.Helper()
		if err := f.s.DashboardSessionEnd(f.ctx, store.DashboardSessionEndParams{ID: id, Expires: at(12 * time.Hour), Audit: signOutEvent(id)}); err != nil {
			f.t.Fatalf("DashboardSessionEnd(%q): %v", id, err)
		}
	}
	end("s-1")
	end("s-1")
	end("s-2")
	f.wantSessionsEnded(map[string]bool{"s-1": true, "s-2": true}, "after three sign-outs of two sessions")
	got, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	var details []string
	for _, e := range got {
		details = append(details, e.Detail)
		if w := signOutEvent(e.Detail); e.Kind != w.Kind || e.Actor != w.Actor || e.Source != w.Source || !e.At.Equal(w.At) {
			f.t.Errorf("audit event %+v, want %+v", e, w)
		}
	}
	if want := []string{"s-1", "s-2"}; !slices.Equal(details, want) {
		f.t.Errorf("the audit log records the sign-outs of %v, want %v (one per session ended)", details, want)
	}
}

// testSignOutWithFailingAudit: an event the store refuses to append (it
// has no kind) fails the sign-out, and the session is not ended.
func testSignOutWithFailingAudit(f *fixture) {
	bad := &store.AuditEvent{At: at(time.Minute), Actor: "apikey:k-1", Detail: "no kind"}
	err := f.s.DashboardSessionEnd(f.ctx, store.DashboardSessionEndParams{ID: "s-1", Expires: at(12 * time.Hour), Audit: bad})
	if err == nil {
		f.t.Errorf("DashboardSessionEnd with an event that fails succeeded")
	}
	f.wantSessionsEnded(map[string]bool{"s-1": false}, "after a sign-out whose event failed")
	if n := f.auditLen(); n != 0 {
		f.t.Errorf("the audit log holds %d events, want none", n)
	}
	// The session can be signed out of once the event can be written.
	if err := f.s.DashboardSessionEnd(f.ctx, store.DashboardSessionEndParams{ID: "s-1", Expires: at(12 * time.Hour), Audit: signOutEvent("s-1")}); err != nil {
		f.t.Fatalf("DashboardSessionEnd after the failed one: %v", err)
	}
	f.wantSessionsEnded(map[string]bool{"s-1": true}, "after signing out again")
	if n := f.auditLen(); n != 1 {
		f.t.Errorf("the audit log holds %d events, want the one sign-out", n)
	}
}
