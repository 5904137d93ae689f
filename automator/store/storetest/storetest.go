// Package storetest is the conformance suite that every store.Store backend
// runs unchanged: sqlitestore and pgstore. A change in store
// semantics arrives with a case here, never with a test for one backend only.
//
// The suite never sleeps: every time is injected through the params' Now
// fields, counted from a fixed base time. Times carry microseconds, the
// precision every backend must keep (PostgreSQL's timestamptz has no more).
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// Run runs the conformance suite against the backend that open makes. open
// must return a fresh, empty store for the (sub)test it is given and close it
// when that test ends (t.Cleanup). Subtests run in parallel, one store each.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	all := slices.Concat(accountCases, workCases, claimCases, completeCases, cancelCases,
		expireCases, instanceCases, apiKeyCases, idempotencyCases, replicaCases, listCases, securityCases, handoffCases, purgeCases, keyPurgeCases,
		endedCases, dashboardCases, endOpenCases, deleteCases)
	for _, c := range all {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(&fixture{t: t, ctx: t.Context(), s: open(t)})
		})
	}
}

type testCase struct {
	name string
	run  func(f *fixture)
}

// base is the suite's clock at zero. Its microseconds (…678901) check that
// backends keep sub-millisecond precision.
var base = time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)

// at is the suite's clock d after base.
func at(d time.Duration) time.Time { return base.Add(d) }

// fixture is one subtest's store with factories for test data.
type fixture struct {
	t   *testing.T
	ctx context.Context
	s   store.Store
	// expect is the Expect of every WorkClaim f.claim makes.
	expect bool
}

func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// account creates an account with made-up secrets.
func (f *fixture) account(name string) store.Account {
	f.t.Helper()
	a, err := f.s.AccountCreate(f.ctx, store.AccountCreateParams{
		Name:      name,
		TokenHash: hash("token of " + name),
		KeyID:     1,
		SealedKey: []byte("sealed key of " + name),
		Now:       base,
	})
	if err != nil {
		f.t.Fatalf("AccountCreate(%q): %v", name, err)
	}
	return a
}

// enqueue queues a unit of account at queuedAt with the given deadline.
func (f *fixture) enqueue(id, account string, queuedAt, deadline time.Time) store.Work {
	f.t.Helper()
	return f.enqueueFor(id, account, queuedAt, deadline, nil)
}

// enqueueFor is enqueue, with the unit stored already claimed when claim is
// not nil (store.WorkEnqueueParams.ClaimFor).
func (f *fixture) enqueueFor(id, account string, queuedAt, deadline time.Time, claim *store.ClaimRef) store.Work {
	f.t.Helper()
	w, err := f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{
		ID:            id,
		Account:       account,
		KeyID:         7,
		SealedCommand: []byte("sealed command of " + id),
		Now:           queuedAt,
		Deadline:      deadline,
		ClaimFor:      claim,
	})
	if err != nil {
		f.t.Fatalf("WorkEnqueue(%q, claimed for %v): %v", id, claim, err)
	}
	return w
}

// claim claims up to max units of account for instance, with claim ids
// "<instance>-claim-<i>".
func (f *fixture) claim(account, instance string, max int, now time.Time) []store.Work {
	f.t.Helper()
	ws, err := f.s.WorkClaim(f.ctx, store.WorkClaimParams{
		Account:    account,
		InstanceID: instance,
		Max:        max,
		ClaimIDs:   claimIDs(instance+"-claim", max),
		Now:        now,
		Expect:     f.expect,
	})
	if err != nil {
		f.t.Fatalf("WorkClaim(%q, %q, max %d): %v", account, instance, max, err)
	}
	return ws
}

// claimOne claims exactly the unit id, which must be the account's only
// claimable one, and returns it.
func (f *fixture) claimOne(account, instance, id string, now time.Time) store.Work {
	f.t.Helper()
	ws := f.claim(account, instance, 1, now)
	if len(ws) != 1 || ws[0].ID != id {
		f.t.Fatalf("WorkClaim by %q: claimed %v, want [%s]", instance, ids(ws), id)
	}
	return ws[0]
}

// complete completes a claimed unit as succeeded.
func (f *fixture) complete(w store.Work, now time.Time) store.Work {
	f.t.Helper()
	done, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{
		ID:           w.ID,
		ClaimID:      w.ClaimID,
		State:        store.StateSucceeded,
		SealedResult: []byte("sealed result of " + w.ID),
		Now:          now,
	})
	if err != nil {
		f.t.Fatalf("WorkComplete(%q): %v", w.ID, err)
	}
	return done
}

func (f *fixture) get(id string) store.Work {
	f.t.Helper()
	w, err := f.s.WorkGet(f.ctx, id)
	if err != nil {
		f.t.Fatalf("WorkGet(%q): %v", id, err)
	}
	return w
}

// wantErr reports an error unless errors.Is(err, target).
func (f *fixture) wantErr(what string, err, target error) {
	f.t.Helper()
	if !errors.Is(err, target) {
		f.t.Errorf("%s: error = %v, want %v", what, err, target)
	}
}

// wantWork reports every field of got that differs from want.
func (f *fixture) wantWork(what string, got, want store.Work) {
	f.t.Helper()
	for _, d := range diffWork(got, want) {
		f.t.Errorf("%s: %s", what, d)
	}
}

// wantState reports an error unless the stored unit id is in state want.
func (f *fixture) wantState(id string, want store.State) {
	f.t.Helper()
	if got := f.get(id).State; got != want {
		f.t.Errorf("unit %s: state %s, want %s", id, got, want)
	}
}

func diffWork(got, want store.Work) []string {
	var d []string
	str := func(name, g, w string) {
		if g != w {
			d = append(d, fmt.Sprintf("%s = %q, want %q", name, g, w))
		}
	}
	tm := func(name string, g, w time.Time) {
		if !g.Equal(w) {
			d = append(d, fmt.Sprintf("%s = %v, want %v", name, g, w))
		}
	}
	blob := func(name string, g, w []byte) {
		if !bytes.Equal(g, w) {
			d = append(d, fmt.Sprintf("%s = %x, want %x", name, g, w))
		}
	}
	str("ID", got.ID, want.ID)
	str("Account", got.Account, want.Account)
	str("State", string(got.State), string(want.State))
	if got.KeyID != want.KeyID {
		d = append(d, fmt.Sprintf("KeyID = %d, want %d", got.KeyID, want.KeyID))
	}
	blob("SealedCommand", got.SealedCommand, want.SealedCommand)
	tm("QueuedAt", got.QueuedAt, want.QueuedAt)
	tm("Deadline", got.Deadline, want.Deadline)
	tm("ClaimedAt", got.ClaimedAt, want.ClaimedAt)
	str("InstanceID", got.InstanceID, want.InstanceID)
	str("ClaimID", got.ClaimID, want.ClaimID)
	tm("FinishedAt", got.FinishedAt, want.FinishedAt)
	blob("SealedResult", got.SealedResult, want.SealedResult)
	str("Reason", got.Reason, want.Reason)
	return d
}

func claimIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func ids(ws []store.Work) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}
