package storetest

import (
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var dashboardCases = []testCase{
	{"DashboardSessionEndIsSeenUntilPurgedPastItsExpiry", testDashboardSessionEnd},
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
