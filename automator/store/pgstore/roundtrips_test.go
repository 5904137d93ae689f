package pgstore

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestConcurrentEqualEventsAllArrive: events published at once share one
// transaction, where PostgreSQL would fold equal notifications into one;
// each must still arrive (two units queued on one account are two
// wake-ups).
func TestConcurrentEqualEventsAllArrive(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	events := listening(t, b)
	const n = 50
	e := Event{Kind: EventWorkQueued, Account: "acme"}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := a.Publish(t.Context(), e); err != nil {
				t.Errorf("Publish: %v", err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		if got := receive(t, events, "every event"); got != e {
			t.Fatalf("event %d: received %+v, want %+v", i, got, e)
		}
	}
	select {
	case got := <-events:
		t.Errorf("received an extra event %+v", got)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestCompleteOfAnotherAccountIsNotFound: WorkComplete with Account set
// refuses a unit of another account as if it did not exist, and changes
// nothing.
func TestCompleteOfAnotherAccountIsNotFound(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, name := range []string{"acme", "globex"} {
		if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: name, TokenHash: []byte("h-" + name), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(t, s, "w-1", now, now.Add(time.Hour))
	claimed, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i", Max: 1, ClaimIDs: []string{"c-1"}, Now: now})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("WorkClaim = %v, %v", claimed, err)
	}
	complete := func(account string) (store.Work, error) {
		return s.WorkComplete(ctx, store.WorkCompleteParams{ID: "w-1", ClaimID: "c-1", Account: account, State: store.StateSucceeded,
			SealedResult: []byte("r"), Now: now.Add(time.Second), Audit: &store.AuditEvent{At: now, Kind: store.AuditWorkEnded}})
	}
	w, err := complete("globex")
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("WorkComplete as another account = %v, want ErrNotFound", err)
	}
	if w.ID != "" {
		t.Errorf("WorkComplete as another account returned the unit %+v", w)
	}
	if w, err := s.WorkGet(ctx, "w-1"); err != nil || w.State != store.StateClaimed {
		t.Fatalf("after the refusal: %+v, %v; want it still claimed", w, err)
	}
	events, err := s.AuditList(ctx, store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Kind == store.AuditWorkEnded {
			t.Errorf("the refusal appended %+v to the audit log", e)
		}
	}
	if w, err := complete("acme"); err != nil || w.State != store.StateSucceeded {
		t.Fatalf("WorkComplete as its account = %+v, %v", w, err)
	}
	// Once it ended, another account still sees nothing of it.
	if _, err := complete("globex"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("WorkComplete of the ended unit as another account = %v, want ErrNotFound", err)
	}
}
