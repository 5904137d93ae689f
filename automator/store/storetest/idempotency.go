package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var idempotencyCases = []testCase{
	{"WorkEnqueueWithUsedKeyReturnsTheFirstUnit", testIdempotencyKeyReturnsFirst},
	{"WorkEnqueueKeysAreScopedToTheAccount", testIdempotencyKeyPerAccount},
	{"WorkEnqueueKeyAgedOutMakesANewUnit", testIdempotencyKeyAgedOut},
	{"WorkEnqueueConcurrentSameKeyMakesOneUnit", testIdempotencyKeyConcurrent},
	{"WorkByIdempotencyKeyFindsWhatEnqueueWouldReturn", testWorkByIdempotencyKey},
}

func keyed(id, account, key string, now time.Time) store.WorkEnqueueParams {
	return store.WorkEnqueueParams{
		ID: id, Account: account, KeyID: 1, SealedCommand: []byte("sealed " + id),
		Now: now, Deadline: now.Add(time.Minute),
		IdempotencyKey: key, IdempotencySince: now.Add(-24 * time.Hour),
	}
}

func testIdempotencyKeyReturnsFirst(f *fixture) {
	f.account("acme")
	first, err := f.s.WorkEnqueue(f.ctx, keyed("w-1", "acme", "k", at(0)))
	if err != nil {
		f.t.Fatalf("first WorkEnqueue: %v", err)
	}
	if first.IdempotencyKey != "k" {
		f.t.Errorf("IdempotencyKey = %q, want k", first.IdempotencyKey)
	}
	// Still the same unit after it was claimed and finished.
	f.complete(f.claimOne("acme", "a", "w-1", at(time.Second)), at(2*time.Second))
	got, err := f.s.WorkEnqueue(f.ctx, keyed("w-2", "acme", "k", at(time.Hour)))
	f.wantErr("second WorkEnqueue with the same key", err, store.ErrDuplicate)
	if got.ID != "w-1" || got.State != store.StateSucceeded {
		f.t.Fatalf("second WorkEnqueue returned %q in state %s, want w-1 succeeded", got.ID, got.State)
	}
	if _, err := f.s.WorkGet(f.ctx, "w-2"); !errors.Is(err, store.ErrNotFound) {
		f.t.Fatalf("a second unit was stored: WorkGet(w-2) = %v", err)
	}
	// No key: never a duplicate.
	for i := range 2 {
		p := keyed(fmt.Sprintf("n-%d", i), "acme", "", at(0))
		if _, err := f.s.WorkEnqueue(f.ctx, p); err != nil {
			f.t.Fatalf("WorkEnqueue without key: %v", err)
		}
	}
}

func testIdempotencyKeyPerAccount(f *fixture) {
	f.account("acme")
	f.account("globex")
	if _, err := f.s.WorkEnqueue(f.ctx, keyed("w-1", "acme", "k", at(0))); err != nil {
		f.t.Fatal(err)
	}
	w, err := f.s.WorkEnqueue(f.ctx, keyed("w-2", "globex", "k", at(0)))
	if err != nil || w.ID != "w-2" {
		f.t.Fatalf("same key on another account: %q, %v; want a new unit", w.ID, err)
	}
}

func testIdempotencyKeyAgedOut(f *fixture) {
	f.account("acme")
	if _, err := f.s.WorkEnqueue(f.ctx, keyed("w-1", "acme", "k", at(0))); err != nil {
		f.t.Fatal(err)
	}
	later := at(25 * time.Hour) // the window is 24 h
	w, err := f.s.WorkEnqueue(f.ctx, keyed("w-2", "acme", "k", later))
	if err != nil || w.ID != "w-2" {
		f.t.Fatalf("key reused after its window: %q, %v; want a new unit", w.ID, err)
	}
	if old := f.get("w-1"); old.IdempotencyKey != "" {
		f.t.Errorf("the aged-out unit still holds key %q", old.IdempotencyKey)
	}
	w, err = f.s.WorkEnqueue(f.ctx, keyed("w-3", "acme", "k", later.Add(time.Second)))
	f.wantErr("third WorkEnqueue", err, store.ErrDuplicate)
	if w.ID != "w-2" {
		f.t.Fatalf("third WorkEnqueue returned %q, want w-2", w.ID)
	}
}

func testIdempotencyKeyConcurrent(f *fixture) {
	f.account("acme")
	const n = 20
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := f.s.WorkEnqueue(f.ctx, keyed(fmt.Sprintf("w-%d", i), "acme", "k", at(0)))
			ids[i], errs[i] = w.ID, err
		}()
	}
	wg.Wait()
	created := 0
	for i := range n {
		switch {
		case errs[i] == nil:
			created++
		case errors.Is(errs[i], store.ErrDuplicate):
		default:
			f.t.Fatalf("enqueue %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			f.t.Fatalf("enqueue %d returned unit %q, enqueue 0 %q: want one unit for all", i, ids[i], ids[0])
		}
	}
	if created != 1 {
		f.t.Fatalf("%d enqueues created a unit, want exactly 1", created)
	}
}

func testWorkByIdempotencyKey(f *fixture) {
	f.account("acme")
	f.account("globex")
	if _, err := f.s.WorkEnqueue(f.ctx, keyed("w-1", "acme", "k", at(time.Hour))); err != nil {
		f.t.Fatal(err)
	}
	w, err := f.s.WorkByIdempotencyKey(f.ctx, "acme", "k", at(0))
	if err != nil || w.ID != "w-1" || w.State != store.StateQueued || string(w.SealedCommand) != "sealed w-1" {
		f.t.Fatalf("WorkByIdempotencyKey(acme, k) = %q in state %s, %v; want w-1 queued", w.ID, w.State, err)
	}
	// Queued at the window's start is in it; before it, not.
	if _, err := f.s.WorkByIdempotencyKey(f.ctx, "acme", "k", at(time.Hour)); err != nil {
		f.t.Fatalf("with the window starting at the unit's queueing: %v; want w-1", err)
	}
	_, err = f.s.WorkByIdempotencyKey(f.ctx, "acme", "k", at(time.Hour+time.Second))
	f.wantErr("WorkByIdempotencyKey after the window", err, store.ErrNotFound)
	_, err = f.s.WorkByIdempotencyKey(f.ctx, "acme", "other", at(0))
	f.wantErr("WorkByIdempotencyKey of an unused key", err, store.ErrNotFound)
	_, err = f.s.WorkByIdempotencyKey(f.ctx, "globex", "k", at(0))
	f.wantErr("WorkByIdempotencyKey on another account", err, store.ErrNotFound)
}
