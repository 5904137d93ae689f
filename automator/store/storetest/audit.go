package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// testAuditListSince: AuditList with Since returns every event whose At is
// at or after it, and only those, in the order of their Seqs, paged by
// AfterSeq as `automator audit --since` pages, whatever Since and Limit.
// An event's At is stamped by its caller before the write, so a later Seq
// may carry an earlier At: the event appended after 12s here is stamped
// 11s. A listing since 11s then starts at the event of 12s, before the
// earliest At it keeps (a backend that starts where At first reaches Since
// loses it).
func testAuditListSince(f *fixture) {
	stamps := []time.Duration{
		10 * time.Second,
		12 * time.Second,
		11 * time.Second, // stamped before the previous event, appended after it
		13 * time.Second,
		13 * time.Second, // the same At twice
		12*time.Second + time.Microsecond,
		14 * time.Second,
		9 * time.Second, // stamped before every earlier event
		15 * time.Second,
	}
	var all []store.AuditEvent
	for i, d := range stamps {
		e, err := f.s.AuditAppend(f.ctx, store.AuditEvent{At: at(d), Kind: store.AuditAuthFailed, Detail: fmt.Sprintf("event %d", i)})
		if err != nil {
			f.t.Fatalf("AuditAppend(event %d): %v", i, err)
		}
		all = append(all, e)
	}
	details := func(es []store.AuditEvent) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Detail)
		}
		return out
	}
	var sinces []time.Time
	sinces = append(sinces, time.Time{}, at(0), at(time.Hour))
	for _, d := range stamps {
		sinces = append(sinces, at(d), at(d-time.Microsecond), at(d+time.Microsecond))
	}
	for _, since := range sinces {
		var want []store.AuditEvent
		for _, e := range all {
			if !e.At.Before(since) {
				want = append(want, e)
			}
		}
		for _, limit := range []int{1, 2, 3, 100} {
			var got []store.AuditEvent
			p := store.AuditListParams{Since: since, Limit: limit}
			for pages := 0; ; pages++ {
				if pages > len(all) {
					f.t.Fatalf("AuditList(Since %v, Limit %d) pages on past %d pages", since, limit, pages)
				}
				page, err := f.s.AuditList(f.ctx, p)
				if err != nil {
					f.t.Fatalf("AuditList(%+v): %v", p, err)
				}
				if len(page) > limit {
					f.t.Fatalf("AuditList(%+v) returned %d events, more than the limit", p, len(page))
				}
				got = append(got, page...)
				if len(page) < limit {
					break
				}
				p.AfterSeq = page[len(page)-1].Seq
			}
			if !slices.Equal(details(got), details(want)) ||
				!slices.EqualFunc(got, want, func(g, w store.AuditEvent) bool { return g.Seq == w.Seq && g.At.Equal(w.At) }) {
				f.t.Errorf("AuditList(Since %s, Limit %d, paged) = %q; want %q (every event at or after Since, by Seq)",
					since.Sub(base), limit, details(got), details(want))
			}
		}
	}
}

// testAuditListFilters: AuditList with Account, WorkID or Kinds returns the
// events that match every filter set, and all of them, in the order of
// their Seqs, paged by AfterSeq, with Since or without: a page that reads
// past its limit of events that do not match still finds the next that
// does. An account's events include those of its deleted namesakes (the
// units its deletion cancelled are recorded under its tombstone), not
// those of an account whose name begins with its own; a value no store
// holds as text matches nothing, with no error.
func testAuditListFilters(f *fixture) {
	type ev struct {
		d             time.Duration
		kind, account string
		work          string
	}
	evs := []ev{
		{1 * time.Second, store.AuditWorkQueued, "acme", "w_1"},
		{2 * time.Second, store.AuditWorkQueued, "globex", "w_2"},
		{3 * time.Second, store.AuditAuthFailed, "", ""},
		{4 * time.Second, store.AuditWorkEnded, "acme", "w_1"},
		{5 * time.Second, store.AuditAuthDenied, "acme", ""},
		{6 * time.Second, store.AuditWorkEnded, "globex", "w_2"},
		{7 * time.Second, store.AuditAccountCreated, "initech", ""},
		{8 * time.Second, store.AuditWorkDuplicate, "acme", "w_1"},
		{9 * time.Second, store.AuditWorkQueued, "acme", "w_3"},
		{10 * time.Second, store.AuditWorkEnded, "acme", "w_3"},
		// acme deleted, its open unit cancelled under its tombstone; a
		// namesake's tombstone, and an account whose name only begins
		// with acme's.
		{11 * time.Second, store.AuditWorkEnded, store.DeletedAccountName("acme", at(11*time.Second)), "w_4"},
		{12 * time.Second, store.AuditAccountCreated, "acme-2", ""},
		{13 * time.Second, store.AuditWorkEnded, "acme-2" + " (deleted 2026)", "w_5"},
	}
	var all []store.AuditEvent
	for i, e := range evs {
		got, err := f.s.AuditAppend(f.ctx, store.AuditEvent{At: at(e.d), Kind: e.kind, Account: e.account, WorkID: e.work, Detail: fmt.Sprintf("event %d", i)})
		if err != nil {
			f.t.Fatalf("AuditAppend(event %d): %v", i, err)
		}
		all = append(all, got)
	}
	for _, c := range []store.AuditListParams{
		{Account: "acme"},
		{Account: "globex"},
		{Account: "nobody"},
		{WorkID: "w_1"},
		{WorkID: "w_3", Since: at(10 * time.Second)},
		{Kinds: []string{store.AuditWorkEnded}},
		{Kinds: []string{store.AuditWorkQueued, store.AuditAuthFailed, store.AuditAccountCreated}},
		{Kinds: []string{"no.such_kind"}},
		{Account: "acme", Kinds: []string{store.AuditWorkEnded, store.AuditAuthDenied}},
		{Account: "acme", WorkID: "w_2"},
		{Account: "acme", WorkID: "w_1", Kinds: []string{store.AuditWorkDuplicate}},
		{Account: "acme", Since: at(5 * time.Second)},
		{Account: "acme-2"},
		{Account: "\xff"},
		{WorkID: "w\x00"},
		{Kinds: []string{"\xff"}},
	} {
		var want []string
		for _, e := range all {
			if !e.At.Before(c.Since) && (c.Account == "" || store.OfAccount(e.Account, c.Account)) &&
				(c.WorkID == "" || e.WorkID == c.WorkID) && (len(c.Kinds) == 0 || slices.Contains(c.Kinds, e.Kind)) {
				want = append(want, e.Detail)
			}
		}
		for _, limit := range []int{1, 2, 100} {
			p := c
			p.Limit = limit
			var got []string
			for pages := 0; ; pages++ {
				if pages > len(all) {
					f.t.Fatalf("AuditList(%+v) pages on past %d pages", p, pages)
				}
				page, err := f.s.AuditList(f.ctx, p)
				if err != nil {
					f.t.Fatalf("AuditList(%+v): %v", p, err)
				}
				for _, e := range page {
					got = append(got, e.Detail)
				}
				if len(page) < limit {
					break
				}
				p.AfterSeq = page[len(page)-1].Seq
			}
			if !slices.Equal(got, want) {
				f.t.Errorf("AuditList(account %q, work %q, kinds %q, since %v, limit %d, paged) = %q; want %q",
					c.Account, c.WorkID, c.Kinds, c.Since, limit, got, want)
			}
		}
	}
}

// testAuditPurge: AuditPurge deletes the events stamped more than
// Retention before Now, oldest first, Max at a time, whatever order they
// were appended in. Its first call for a later time than any earlier
// purge's appends one audit.purged event saying so; the calls that go on
// to that time append none, nor does one that finds nothing to delete. A
// purge of everything old keeps its own event.
func testAuditPurge(f *fixture) {
	stamps := []time.Duration{10 * time.Second, 12 * time.Second, 11 * time.Second, 13 * time.Second,
		20 * time.Second, 14 * time.Second, 30 * time.Second, day + 15*time.Second}
	for i, d := range stamps {
		if _, err := f.s.AuditAppend(f.ctx, store.AuditEvent{At: at(d), Kind: store.AuditAuthFailed, Detail: fmt.Sprintf("event %d", i)}); err != nil {
			f.t.Fatalf("AuditAppend(event %d): %v", i, err)
		}
	}
	purge := func(now time.Time, limit int, said string) int {
		f.t.Helper()
		n, err := f.s.AuditPurge(f.ctx, store.AuditPurgeParams{Now: now, Retention: day, Max: limit,
			Audit: store.AuditEvent{Kind: store.AuditPurged, Actor: "automator", Detail: said}})
		if err != nil {
			f.t.Fatalf("AuditPurge(now %v, max %d): %v", now.Sub(base), limit, err)
		}
		return n
	}
	for _, p := range []store.AuditPurgeParams{
		{Now: at(2 * day), Retention: day},
		{Now: at(2 * day), Retention: day - time.Second, Max: 10},
	} {
		if _, err := f.s.AuditPurge(f.ctx, p); err == nil {
			f.t.Errorf("AuditPurge(max %d, retention %v): no error, want one", p.Max, p.Retention)
		}
	}

	// Older than a day at a day and 15s: events 0, 1, 2, 3 and 5 (14s,
	// appended after 20s) go.
	for i, want := range []int{2, 2, 1, 0} {
		if n := purge(at(day+15*time.Second), 2, fmt.Sprint("retention ", i)); n != want {
			f.t.Errorf("purge %d of at most 2 deleted %d events, want %d", i, n, want)
		}
	}
	want := []string{"event 4", "event 6", "event 7", store.AuditPurgedDetail("retention 0", at(15*time.Second))}
	got := auditDetails(f)
	if !slices.Equal(got, want) {
		f.t.Fatalf("the log after purging the events older than a day = %q; want %q", got, want)
	}
	if n := purge(at(day+16*time.Second), 10, "nothing to delete"); n != 0 || len(auditDetails(f)) != 4 {
		f.t.Errorf("a purge finding nothing to delete deleted %d events and left %q; want none deleted, no event added", n, auditDetails(f))
	}

	// Three days in, everything older than two days.
	if _, err := f.s.AuditAppend(f.ctx, store.AuditEvent{At: at(3 * day), Kind: store.AuditAuthFailed, Detail: "newest"}); err != nil {
		f.t.Fatal(err)
	}
	if n := purge(at(3*day), 100, "retention 4"); n != 4 {
		f.t.Errorf("the purge of everything older than two days deleted %d events, want 4", n)
	}
	if got := auditDetails(f); !slices.Equal(got, []string{"newest", store.AuditPurgedDetail("retention 4", at(2*day))}) {
		f.t.Errorf("the log after purging everything older than two days = %q; want the newest event and this purge's", got)
	}
}

// testAuditPurgeKeepsTheNewestEvent: the newest event (by seq) is never
// purged, however old its stamp (a clock stepped back), even by a purge
// whose time a record covers already, which appends no event of its own:
// SQLite would hand its seq out again.
func testAuditPurgeKeepsTheNewestEvent(f *fixture) {
	appendAt := func(d time.Duration, detail string) {
		f.t.Helper()
		if _, err := f.s.AuditAppend(f.ctx, store.AuditEvent{At: at(d), Kind: store.AuditAuthFailed, Detail: detail}); err != nil {
			f.t.Fatal(err)
		}
	}
	purge := func() int {
		f.t.Helper()
		n, err := f.s.AuditPurge(f.ctx, store.AuditPurgeParams{Now: at(3 * day), Retention: day, Max: 10,
			Audit: store.AuditEvent{Kind: store.AuditPurged, Actor: "automator", Detail: "r"}})
		if err != nil {
			f.t.Fatalf("AuditPurge: %v", err)
		}
		return n
	}
	appendAt(10*time.Hour, "old")
	appendAt(3*day, "recent")
	if n := purge(); n != 1 {
		f.t.Fatalf("the first purge deleted %d events, want the old one", n)
	}
	appendAt(day, "newest, stamped by a clock stepped back")
	if n := purge(); n != 0 {
		f.t.Errorf("a purge with only the newest event due deleted %d events, want none", n)
	}
	want := []string{"recent", store.AuditPurgedDetail("r", at(2*day)), "newest, stamped by a clock stepped back"}
	if got := auditDetails(f); !slices.Equal(got, want) {
		f.t.Errorf("the log = %q; want %q", got, want)
	}
}

// day is a day, the least retention of the audit log.
const day = 24 * time.Hour

// auditDetails lists the details of every event of the audit log.
func auditDetails(f *fixture) []string {
	f.t.Helper()
	es, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 100})
	if err != nil {
		f.t.Fatalf("AuditList: %v", err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Detail)
	}
	return out
}
