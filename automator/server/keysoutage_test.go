package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// keysOutageStore fails the reads of an account's keys and of a unit with
// the database out of reach while down is set.
type keysOutageStore struct {
	store.Store
	down *atomic.Bool
}

func (s keysOutageStore) AccountKeys(ctx context.Context, account string) ([]store.AccountKey, error) {
	if s.down.Load() {
		return nil, fmt.Errorf("reading keys: %w", store.ErrUnavailable)
	}
	return s.Store.AccountKeys(ctx, account)
}

func (s keysOutageStore) WorkGet(ctx context.Context, id string) (store.Work, error) {
	if s.down.Load() {
		return store.Work{}, fmt.Errorf("reading a unit: %w", store.ErrUnavailable)
	}
	return s.Store.WorkGet(ctx, id)
}

// TestAResultPostedWhileTheDatabaseIsDownIsNotRefused: to open a posted
// result the automator reads the account's keys again once its cached
// copy is 30 s old. With the database out of reach just then (PostgreSQL
// restarting, a replica that has not read them yet) the result is answered
// UNAVAILABLE, alone or in a batch, which the proxy posts again, and not
// refused as one that did not open, which the proxy would drop: its
// script ran. Posted once the database is back, it is recorded.
func TestAResultPostedWhileTheDatabaseIsDownIsNotRefused(t *testing.T) {
	t.Parallel()
	clock, log, down := newFakeClock(), &syncLog{}, &atomic.Bool{}
	e := newEnv(t, envOptions{clock: clock, log: log, wrap: func(st store.Store) store.Store { return keysOutageStore{st, down} }})
	ctx := context.Background()
	caller, px := e.callerClient(), e.proxyClient()
	alone, inBatch := submit(t, caller, e.account, time.Hour), submit(t, caller, e.account, time.Hour)
	resp, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 2})
	if err != nil || len(resp.GetClaims()) != 2 {
		t.Fatalf("poll: %v, %d claims, want 2", err, len(resp.GetClaims()))
	}
	results := map[string]*automatorv1.CompleteRequest{}
	for _, c := range resp.GetClaims() {
		results[c.GetWorkId()] = &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("ran")})}
	}
	clock.Advance(31 * time.Second) // the cached keys are read again
	down.Store(true)
	if _, err := px.Complete(ctx, results[alone.GetWorkId()]); status.Code(err) != codes.Unavailable {
		t.Errorf("a result posted while the database is out of reach: %v; want UNAVAILABLE, which the proxy posts again", err)
	}
	batch, err := px.CompleteBatch(ctx, &automatorv1.CompleteBatchRequest{Results: []*automatorv1.CompleteRequest{results[inBatch.GetWorkId()]}})
	if err != nil {
		t.Fatal(err)
	}
	if o := batch.GetOutcomes()[0]; codes.Code(o.GetCode()) != codes.Unavailable {
		t.Errorf("a result of a batch posted while the database is out of reach: %v %q; want UNAVAILABLE", codes.Code(o.GetCode()), o.GetMessage())
	}
	if got := log.lines("result refused"); len(got) != 0 {
		t.Errorf("results posted while the database is out of reach are logged as refused: %q", got)
	}

	down.Store(false)
	for _, w := range []*automatorv1.WorkStatus{alone, inBatch} {
		if _, err := px.Complete(ctx, results[w.GetWorkId()]); err != nil {
			t.Fatalf("the result posted again once the database is back: %v", err)
		}
		st, err := caller.Get(ctx, &automatorv1.GetRequest{WorkId: w.GetWorkId()})
		if err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != "ran" {
			t.Errorf("the unit after its result was posted again: %v, %v; want succeeded with its output", st, err)
		}
	}
}

// silentCredentialsStore leaves the lookups of an API key unanswered
// until their context ends, as a database cut off without a word does.
type silentCredentialsStore struct{ store.Store }

func (s silentCredentialsStore) APIKeyGetByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	<-ctx.Done()
	return store.APIKey{}, ctx.Err()
}

// TestACredentialLookupThatGetsNoAnswerBeginsAnOutage: a call whose
// credential lookup gets no answer within its bound is answered
// UNAVAILABLE, and the automator counts the database out of reach from
// then (DatabaseUnreachableSince), as for its own store calls' errors: a
// replica cut off without a word met it first there, 3 s in, and counted
// it only from a background call's 30 s bound (a review).
func TestACredentialLookupThatGetsNoAnswerBeginsAnOutage(t *testing.T) {
	t.Parallel()
	// No sweep after the first: a sweep answered after the lookup ends
	// the outage, rightly (the database answers), before the test looks
	// (seen under load, in the package's run).
	e := newEnv(t, envOptions{wrap: func(st store.Store) store.Store { return silentCredentialsStore{st} }, sweepInterval: time.Hour})
	if !e.srv.DatabaseUnreachableSince().IsZero() {
		t.Fatal("an outage before any call")
	}
	_, err := e.callerClient().Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("submit whose credential lookup gets no answer: %v; want UNAVAILABLE", err)
	}
	if e.srv.DatabaseUnreachableSince().IsZero() {
		t.Error("the automator does not count the database out of reach after a credential lookup got no answer")
	}
}
