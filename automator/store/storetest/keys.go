package storetest

import (
	"errors"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// Cases of the purge of previous keys no unit needs (docs/security.md,
// key rotation).
var keyPurgeCases = []testCase{
	{"PreviousKeysNoUnitNeedsAreDeletedByThePurge", testPreviousKeysPurged},
	{"PreviousKeyOfAUnitOfEveryStateIsKept", testPreviousKeyOfEveryStateKept},
}

func (f *fixture) purgeKeys(now time.Time, grace time.Duration) int {
	f.t.Helper()
	n, err := f.s.AccountKeysPurge(f.ctx, store.AccountKeysPurgeParams{Now: now, Grace: grace})
	if err != nil {
		f.t.Fatalf("AccountKeysPurge(now %v, grace %v): %v", now.Sub(base), grace, err)
	}
	return n
}

// wantKeyIDs checks the ids AccountKeys returns for account, the current
// one first.
func (f *fixture) wantKeyIDs(what, account string, want ...uint32) {
	f.t.Helper()
	keys, err := f.s.AccountKeys(f.ctx, account)
	if err != nil {
		f.t.Fatalf("AccountKeys(%s): %v", account, err)
	}
	var got []uint32
	for _, k := range keys {
		got = append(got, k.KeyID)
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("%s: AccountKeys(%s) = ids %v, want %v", what, account, got, want)
	}
}

// enqueueSealed queues a unit of account sealed with key id keyID.
func (f *fixture) enqueueSealed(id, account string, keyID uint32, queuedAt time.Time) store.Work {
	f.t.Helper()
	w, err := f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{
		ID: id, Account: account, KeyID: keyID, SealedCommand: []byte("sealed command of " + id),
		Now: queuedAt, Deadline: queuedAt.Add(100 * time.Hour),
	})
	if err != nil {
		f.t.Fatalf("WorkEnqueue(%q): %v", id, err)
	}
	return w
}

func (f *fixture) cancel(id string, now time.Time) {
	f.t.Helper()
	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: id, Reason: "caller cancelled", Now: now}); err != nil {
		f.t.Fatalf("WorkCancel(%q): %v", id, err)
	}
}

func testPreviousKeysPurged(f *fixture) {
	const grace = 10 * time.Minute
	f.account("acme")
	f.account("globex")
	f.account("initech")
	// acme: key 1 usable until 1h, key 2 until 3h, key 3 current.
	f.rotate(store.AccountRotateParams{Name: "acme", KeyID: 2, SealedKey: []byte("acme key 2"), PreviousUntil: at(time.Hour), Now: at(time.Minute)})
	f.rotate(store.AccountRotateParams{Name: "acme", KeyID: 3, SealedKey: []byte("acme key 3"), PreviousUntil: at(3 * time.Hour), Now: at(2 * time.Hour)})
	// globex: key 1 until 1h; initech: key 1 until 100h. Neither has a unit.
	f.rotate(store.AccountRotateParams{Name: "globex", KeyID: 2, SealedKey: []byte("globex key 2"), PreviousUntil: at(time.Hour), Now: at(time.Minute)})
	f.rotate(store.AccountRotateParams{Name: "initech", KeyID: 2, SealedKey: []byte("initech key 2"), PreviousUntil: at(100 * time.Hour), Now: at(time.Minute)})
	// A unit queued after key 1's overlap but inside the grace (sealed with
	// key 2; in the grace it could be key 1's, from a lagging automator),
	// and one queued at its end.
	f.enqueueSealed("in-grace", "acme", 2, at(time.Hour+5*time.Minute))
	f.cancel("in-grace", at(time.Hour+6*time.Minute))
	f.enqueueSealed("late", "acme", 2, at(time.Hour+grace))

	if n := f.purgeKeys(at(time.Hour+grace), grace); n != 0 {
		f.t.Errorf("AccountKeysPurge at the end of the grace deleted %d keys, want 0", n)
	}
	f.wantKeyIDs("at the end of the grace", "globex", 2, 1)
	if n := f.purgeKeys(at(time.Hour+grace+time.Microsecond), grace); n != 1 {
		f.t.Errorf("AccountKeysPurge after the grace deleted %d keys, want globex's key 1, which no unit needs", n)
	}
	f.wantKeyIDs("after the grace", "globex", 2)
	f.wantKeyIDs("with a unit queued inside key 1's grace", "acme", 3, 2, 1)
	f.wantKeyIDs("in its overlap", "initech", 2, 1)

	f.purge(at(time.Hour+7*time.Minute), 10) // "in-grace"
	if f.exists("in-grace") || !f.exists("late") {
		f.t.Fatal("WorkPurge did not delete the unit inside the grace only")
	}
	if n := f.purgeKeys(at(5*time.Hour), grace); n != 1 {
		f.t.Errorf("AccountKeysPurge after the last unit queued before key 1's time was purged deleted %d keys, want 1", n)
	}
	f.wantKeyIDs("with a unit queued inside key 2's overlap", "acme", 3, 2)

	f.cancel("late", at(5*time.Hour))
	f.purge(at(5*time.Hour), 10)
	if n := f.purgeKeys(at(5*time.Hour), grace); n != 1 {
		f.t.Errorf("AccountKeysPurge with no unit left deleted %d keys, want acme's key 2", n)
	}
	f.wantKeyIDs("with no unit left", "acme", 3)
	f.wantKeyIDs("in its overlap", "initech", 2, 1)
	if n := f.purgeKeys(at(5*time.Hour), grace); n != 0 {
		f.t.Errorf("a second AccountKeysPurge deleted %d keys, want 0", n)
	}
	// The current key stays, however old; the ids of deleted keys are not
	// given again.
	f.wantKeyIDs("at 1000h", "acme", 3)
	if n := f.purgeKeys(at(1000*time.Hour), grace); n != 1 {
		f.t.Errorf("AccountKeysPurge at 1000h deleted %d keys, want initech's key 1 only", n)
	}
	f.wantKeyIDs("at 1000h", "acme", 3)
	f.wantKeyIDs("at 1000h", "initech", 2)
	for _, id := range []uint32{1, 2, 3} {
		_, err := f.s.AccountRotate(f.ctx, store.AccountRotateParams{Name: "acme", KeyID: id, SealedKey: []byte("again"), Now: at(1000 * time.Hour)})
		if !errors.Is(err, store.ErrExists) {
			f.t.Errorf("AccountRotate to key id %d after its keys were purged: %v, want ErrExists", id, err)
		}
	}
	f.rotate(store.AccountRotateParams{Name: "acme", KeyID: 4, SealedKey: []byte("acme key 4"), Now: at(1000 * time.Hour)})
	f.wantKeyIDs("rotated after the purge", "acme", 4, 3)
}

// testPreviousKeyOfEveryStateKept: a unit queued in a key's time keeps the
// key whatever its state, and only its own account's keys.
func testPreviousKeyOfEveryStateKept(f *fixture) {
	const grace = time.Minute
	states := []string{"queued", "claimed", "succeeded", "cancelled"}
	for _, st := range states {
		f.account(st)
		f.account("other-" + st)
		for _, name := range []string{st, "other-" + st} {
			f.rotate(store.AccountRotateParams{Name: name, KeyID: 2, SealedKey: []byte(name + " key 2"), PreviousUntil: at(time.Hour), Now: at(time.Minute)})
		}
		// Sealed with key 1, or with key 2 and its result sealed with key 1
		// by a proxy of the old profile: the store cannot tell.
		f.enqueueSealed(st, st, 2, at(30*time.Minute))
		switch st {
		case "claimed":
			f.claimOne(st, "host", st, at(31*time.Minute))
		case "succeeded":
			f.complete(f.claimOne(st, "host", st, at(31*time.Minute)), at(32*time.Minute))
		case "cancelled":
			f.cancel(st, at(31*time.Minute))
		}
	}
	if n := f.purgeKeys(at(10*time.Hour), grace); n != len(states) {
		f.t.Errorf("AccountKeysPurge deleted %d keys, want the %d of the accounts without units", n, len(states))
	}
	for _, st := range states {
		f.wantKeyIDs("a "+st+" unit queued in key 1's overlap", st, 2, 1)
		f.wantKeyIDs("no unit", "other-"+st, 2)
	}
}
