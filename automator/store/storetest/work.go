package storetest

import (
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var workCases = []testCase{
	{"WorkEnqueueThenGetRoundTripsEveryField", testWorkEnqueueThenGet},
	{"WorkEnqueueWithTakenIDIsErrExists", testWorkEnqueueWithTakenID},
	{"WorkEnqueueForUnknownAccountIsErrNotFound", testWorkEnqueueForUnknownAccount},
	{"WorkGetUnknownIsErrNotFound", testWorkGetUnknown},
	{"WorkNextDeadlineIsTheEarliestOpenOne", testWorkNextDeadline},
	{"WorkStatesReportsKnownIDsOfTheAccountOnly", testWorkStates},
}

func testWorkEnqueueThenGet(f *fixture) {
	f.account("acme")
	p := store.WorkEnqueueParams{
		ID:            "w-1",
		Account:       "acme",
		KeyID:         math.MaxUint32,
		SealedCommand: []byte{0, 0xff, 1, 0, 0x80, 0},
		Now:           at(123 * time.Microsecond),
		Deadline:      at(5*time.Minute + 456*time.Microsecond),
	}
	want := store.Work{
		ID:            p.ID,
		Account:       p.Account,
		State:         store.StateQueued,
		KeyID:         p.KeyID,
		SealedCommand: p.SealedCommand,
		QueuedAt:      p.Now,
		Deadline:      p.Deadline,
	}
	got, err := f.s.WorkEnqueue(f.ctx, p)
	if err != nil {
		f.t.Fatalf("WorkEnqueue: %v", err)
	}
	f.wantWork("WorkEnqueue", got, want)
	f.wantWork("WorkGet", f.get("w-1"), want)
	if got.SealedResult != nil {
		f.t.Errorf("WorkEnqueue: SealedResult = %x, want nil", got.SealedResult)
	}
}

func testWorkEnqueueWithTakenID(f *fixture) {
	f.account("acme")
	f.account("globex")
	first := f.enqueue("w-1", "acme", at(0), at(time.Minute))
	_, err := f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{
		ID:            "w-1",
		Account:       "globex",
		SealedCommand: []byte("other"),
		Now:           at(time.Second),
		Deadline:      at(time.Hour),
	})
	f.wantErr("WorkEnqueue with a taken id", err, store.ErrExists)
	f.wantWork("WorkGet after the refused enqueue", f.get("w-1"), first)
}

func testWorkEnqueueForUnknownAccount(f *fixture) {
	_, err := f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{
		ID:            "w-1",
		Account:       "nobody",
		SealedCommand: []byte("command"),
		Now:           at(0),
		Deadline:      at(time.Minute),
	})
	f.wantErr("WorkEnqueue for an unknown account", err, store.ErrNotFound)
	_, err = f.s.WorkGet(f.ctx, "w-1")
	f.wantErr("WorkGet after the refused enqueue", err, store.ErrNotFound)
}

func testWorkGetUnknown(f *fixture) {
	_, err := f.s.WorkGet(f.ctx, "nope")
	f.wantErr("WorkGet of an unknown id", err, store.ErrNotFound)
	// Ids no unit can have, from a URL's %00 or %C3 alone: not found
	// either, where PostgreSQL refuses such text in a query.
	for _, id := range []string{"w_\x00", "w_\xc3("} {
		_, err := f.s.WorkGet(f.ctx, id)
		f.wantErr(fmt.Sprintf("WorkGet of %q", id), err, store.ErrNotFound)
	}
}

func testWorkNextDeadline(f *fixture) {
	want := func(what string, wantDeadline time.Time, wantOK bool) {
		f.t.Helper()
		d, ok, err := f.s.WorkNextDeadline(f.ctx)
		if err != nil {
			f.t.Fatalf("WorkNextDeadline %s: %v", what, err)
		}
		if ok != wantOK || (ok && !d.Equal(wantDeadline)) {
			f.t.Errorf("WorkNextDeadline %s = %v, %t; want %v, %t", what, d, ok, wantDeadline, wantOK)
		}
	}
	want("on an empty store", time.Time{}, false)

	f.account("acme")
	// A terminal unit with the earliest deadline does not count.
	f.enqueue("done", "acme", at(0), at(time.Minute))
	f.complete(f.claimOne("acme", "i-1", "done", at(time.Second)), at(2*time.Second))
	want("with only terminal units", time.Time{}, false)

	f.enqueue("claimed", "acme", at(time.Second), at(3*time.Minute+7*time.Microsecond))
	f.claimOne("acme", "i-1", "claimed", at(2*time.Second))
	f.enqueue("queued", "acme", at(3*time.Second), at(5*time.Minute))
	want("with claimed and queued units", at(3*time.Minute+7*time.Microsecond), true)

	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "claimed", Reason: "test", Now: at(time.Minute)}); err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}
	want("after cancelling the earliest", at(5*time.Minute), true)

	if _, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(time.Hour)}); err != nil {
		f.t.Fatalf("WorkExpire: %v", err)
	}
	want("after everything expired", time.Time{}, false)
}

func testWorkStates(f *fixture) {
	f.account("acme")
	f.enqueue("claimed", "acme", at(0), at(time.Hour))
	f.enqueue("succeeded", "acme", at(time.Second), at(time.Hour))
	f.enqueue("cancelled", "acme", at(2*time.Second), at(time.Hour))
	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "cancelled", Reason: "test", Now: at(time.Minute)}); err != nil {
		f.t.Fatalf("WorkCancel: %v", err)
	}
	ws := f.claim("acme", "i-1", 2, at(time.Minute))
	if len(ws) != 2 || ws[0].ID != "claimed" || ws[1].ID != "succeeded" {
		f.t.Fatalf("WorkClaim claimed %v, want [claimed succeeded]", ids(ws))
	}
	f.complete(ws[1], at(2*time.Minute))
	f.enqueue("queued", "acme", at(3*time.Second), at(time.Hour))

	// Unknown ids are absent, duplicates harmless, and a long list works
	// (backends that build IN lists must batch them).
	query := []string{"claimed", "nope", "succeeded", "cancelled", "queued", "claimed"}
	for i := range 1200 {
		query = append(query, fmt.Sprintf("unknown-%d", i))
	}
	got, err := f.s.WorkStates(f.ctx, "acme", query)
	if err != nil {
		f.t.Fatalf("WorkStates: %v", err)
	}
	want := map[string]store.State{
		"claimed":   store.StateClaimed,
		"succeeded": store.StateSucceeded,
		"cancelled": store.StateCancelled,
		"queued":    store.StateQueued,
	}
	if !maps.Equal(got, want) {
		f.t.Errorf("WorkStates = %v, want %v", got, want)
	}

	got, err = f.s.WorkStates(f.ctx, "acme", nil)
	if err != nil {
		f.t.Fatalf("WorkStates(nil): %v", err)
	}
	if len(got) != 0 {
		f.t.Errorf("WorkStates(nil) = %v, want an empty map", got)
	}

	// Another account's units are not reported, as if they did not
	// exist: a poll of one account learns nothing of another's.
	f.account("globex")
	f.enqueue("theirs", "globex", at(4*time.Second), at(time.Hour))
	got, err = f.s.WorkStates(f.ctx, "acme", []string{"theirs", "queued"})
	if err != nil {
		f.t.Fatalf("WorkStates: %v", err)
	}
	if want := map[string]store.State{"queued": store.StateQueued}; !maps.Equal(got, want) {
		f.t.Errorf("WorkStates of acme naming a unit of globex = %v, want %v", got, want)
	}
}
