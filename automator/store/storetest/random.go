package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// The randomized test of the units' contract (RunRandomized): workers, on
// two stores sharing one database (two replicas), make random calls with
// random arguments at once (enqueue with and without idempotency keys,
// stored claimed or queued, claim, complete under the right or a wrong
// claim id, cancel, expire and purge at various times, delete an account
// and create it again, the same call sent again at once), record what each
// call answered, and the test checks that the answers together keep the
// contract (DESIGN.md's states and guarantees, the Store's doc comments).
// Between epochs the workers pause, and the listings, counts and reads of
// both stores are checked against each other and against the answers.
//
// Times come from a fake clock: every call's Now is the clock's, advanced
// a few hundred microseconds per call, so deadlines are the calls' own.
//
// Environment:
//
//	STORETEST_RANDOM_DURATION  how long to run in all, per store (default 2.5s)
//	STORETEST_RANDOM_ROUND     how long one seed runs, on a fresh database (default 1.2s)
//	STORETEST_RANDOM_SEED      run this seed only (printed by every run)
//	STORETEST_RANDOM_WORKERS   concurrent workers (default 6; 1 runs one seed's calls in order)
//	STORETEST_RANDOM_KEEPGOING 1: run further seeds after one fails
const (
	EnvRandomDuration = "STORETEST_RANDOM_DURATION"
	EnvRandomRound    = "STORETEST_RANDOM_ROUND"
	EnvRandomSeed     = "STORETEST_RANDOM_SEED"
	EnvRandomWorkers  = "STORETEST_RANDOM_WORKERS"
	// EnvRandomKeepGoing=1 runs further seeds after one fails.
	EnvRandomKeepGoing = "STORETEST_RANDOM_KEEPGOING"
)

// RunRandomized runs rounds of the randomized test, one seed and one fresh
// database each, for STORETEST_RANDOM_DURATION. open returns two stores
// on one new, empty database (two replicas; the same store twice is
// allowed) and closes them when t ends.
func RunRandomized(t *testing.T, open func(t *testing.T) (a, b store.Store)) {
	total := envDuration(t, EnvRandomDuration, 2500*time.Millisecond)
	round := envDuration(t, EnvRandomRound, 1200*time.Millisecond)
	workers := 6
	if v := os.Getenv(EnvRandomWorkers); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", EnvRandomWorkers, v)
		}
		workers = n
	}
	var seeds []uint64
	if v := os.Getenv(EnvRandomSeed); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvRandomSeed, v, err)
		}
		seeds = []uint64{seed}
	}
	start := time.Now()
	var ops, rounds int64
	for i := 0; ; i++ {
		var seed uint64
		switch {
		case seeds != nil && i == len(seeds):
		case seeds != nil:
			seed = seeds[i]
		case i > 0 && time.Since(start) >= total:
		default:
			seed = uint64(time.Now().UnixNano())%1_000_000_000 + uint64(i)
		}
		if seed == 0 {
			break
		}
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			a, b := open(t)
			w := newRworld(t, seed, [2]store.Store{a, b}, workers)
			// The same seed makes the same calls again with one worker;
			// with more, how they interleave differs from run to run.
			t.Logf("%s=%d %s=%d %s=%v: reproduce with these", EnvRandomSeed, seed, EnvRandomWorkers, workers, EnvRandomRound, round)
			w.run(round)
			atomic.AddInt64(&ops, w.ops.Load())
		})
		rounds++
		if !ok {
			t.Logf("seed %d failed: %s=%d %s=%d %s=%v", seed, EnvRandomSeed, seed, EnvRandomWorkers, workers, EnvRandomRound, round)
			if os.Getenv(EnvRandomKeepGoing) != "1" {
				break
			}
		}
	}
	t.Logf("randomized: %d seeds, %d calls in %v", rounds, ops, time.Since(start).Round(time.Millisecond))
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// rObs is one answer about a unit: the unit as a call returned it.
type rObs struct {
	start, end uint64 // the call's sequence numbers
	via        string
	w          store.Work
	sealed     bool // the call returns the sealed command and result
}

// rUnit is what the calls told of one unit id.
type rUnit struct {
	id       string
	account  string // the account its enqueues named
	key      string
	since    time.Time // the idempotency since of the enqueue that stored it
	created  []string  // the calls that said they stored it
	enqStart uint64
	enqEnd   uint64
	queuedAt time.Time
	deadline time.Time
	claims   []string // the calls that said they claimed it
	claimID  string   // the claim id a claim answered with
	instance string
	poll     int64
	ends     []string // the calls that said they ended it
	obs      []rObs
	gone     []rGone // the calls that found no unit
	unknown  bool    // a call on it failed in a way the contract does not name
}

// rGone is a call that found no unit: its sequence numbers.
type rGone struct {
	start, end uint64
	via        string
}

type rDelete struct {
	name       string
	start, end uint64
	tombstone  string
}

type rPurge struct {
	start, end   uint64
	queuedBefore time.Time
}

// rworld is one round: the stores, the clock and the answers.
type rworld struct {
	t       *testing.T
	ctx     context.Context
	seed    uint64
	stores  [2]store.Store
	workers int

	clock atomic.Int64 // microseconds after base
	seq   atomic.Uint64
	ops   atomic.Int64

	mu         sync.Mutex
	units      map[string]*rUnit
	unitIDs    []string
	deletes    []rDelete
	purges     []rPurge
	violations []string
	unexpected int
	nextClaim  map[string]int64 // instance → last poll number
	final      map[string]store.Work
	suspects   []string // units whose answers are printed in full at the end
}

var rAccounts = []string{"acme", "globex", "initech"}

var rInstances = []string{"i-0", "i-1", "i-2", "i-3"}

var rKeys = []string{"k-0", "k-1", "k-2", "k-3", "k-4", "k-5"}

func newRworld(t *testing.T, seed uint64, stores [2]store.Store, workers int) *rworld {
	return &rworld{t: t, ctx: t.Context(), seed: seed, stores: stores, workers: workers,
		units: map[string]*rUnit{}, nextClaim: map[string]int64{}}
}

func (w *rworld) now() time.Time { return at(time.Duration(w.clock.Load()) * time.Microsecond) }

// tick advances the clock by 1 to max µs and returns it.
func (w *rworld) tick(r *rand.Rand, max int64) time.Time {
	return at(time.Duration(w.clock.Add(1+r.Int64N(max))) * time.Microsecond)
}

func (w *rworld) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violateLocked(format, args...)
}

func (w *rworld) violateLocked(format string, args ...any) {
	if len(w.violations) < 60 {
		w.violations = append(w.violations, fmt.Sprintf(format, args...))
	}
	// The units named (the first argument that is a unit id) have their
	// answers printed at the end.
	for _, a := range args {
		if id, ok := a.(string); ok && w.units[id] != nil && !slices.Contains(w.suspects, id) && len(w.suspects) < 5 {
			w.suspects = append(w.suspects, id)
			break
		}
	}
}

// history is what the calls answered of unit id, in order.
func (w *rworld) history(id string) string {
	u := w.units[id]
	if u == nil {
		return "no answer"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "unit %s of %s, key %q, created by %v, claims %v, ends %v, deadline %v:", id, u.account, u.key, u.created, u.claims, u.ends, u.deadline.Sub(base))
	obs := slices.Clone(u.obs)
	slices.SortStableFunc(obs, func(a, b rObs) int { return int(a.start) - int(b.start) })
	for _, o := range obs {
		x := o.w
		fmt.Fprintf(&b, "\n\t%s: %s of %q under %q by %q, claimed %v, finished %v, deadline %v, reason %q",
			o.via, x.State, x.Account, x.ClaimID, x.InstanceID, x.ClaimedAt.Sub(base), x.FinishedAt.Sub(base), x.Deadline.Sub(base), x.Reason)
	}
	for _, g := range u.gone {
		fmt.Fprintf(&b, "\n\t%s: not found", g.via)
	}
	return b.String()
}

// unexpectedErr records an error the contract does not give for the call.
func (w *rworld) unexpectedErr(what string, err error, ids ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unexpected++
	for _, id := range ids {
		if u := w.units[id]; u != nil {
			u.unknown = true
		}
	}
	w.violateLocked("%s: unexpected error: %v", what, err)
}

func (w *rworld) unit(id string) *rUnit {
	u := w.units[id]
	if u == nil {
		u = &rUnit{id: id}
		w.units[id] = u
		w.unitIDs = append(w.unitIDs, id)
	}
	return u
}

func (w *rworld) observe(start, end uint64, via string, x store.Work, sealed bool) {
	if x.ID == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unit(x.ID).obs = append(w.unit(x.ID).obs, rObs{start, end, via, x, sealed})
}

func (w *rworld) begin() uint64 { w.ops.Add(1); return w.seq.Add(1) }

func (w *rworld) store(r *rand.Rand) (int, store.Store) {
	i := r.IntN(2)
	return i, w.stores[i]
}

// pickUnit returns a unit id seen so far, or "".
func (w *rworld) pickUnit(r *rand.Rand) *rUnit {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.unitIDs) == 0 {
		return nil
	}
	// Recent units most often: they are the open ones.
	n := len(w.unitIDs)
	i := n - 1 - min(n-1, int(r.ExpFloat64()*20))
	u := *w.units[w.unitIDs[i]]
	return &u
}

// run runs the round: epochs of concurrent calls, each followed by a check
// of the quiet stores, then the end of every unit.
func (w *rworld) run(round time.Duration) {
	t := w.t
	for _, a := range rAccounts {
		w.createAccount(w.stores[0], a, w.tick(rand.New(rand.NewPCG(w.seed, 0)), 10))
	}
	const epoch = 300 * time.Millisecond
	// One worker makes a fixed number of calls an epoch, one at a time
	// (retries too), so that a seed makes the same calls again.
	epochs := max(1, int(round/epoch))
	deadline := time.Now().Add(round)
	for e := 0; len(w.violations) == 0 && (w.workers == 1 && e < epochs || w.workers > 1 && time.Now().Before(deadline)); e++ {
		ctx, cancel := context.WithTimeout(w.ctx, epoch)
		var wg sync.WaitGroup
		for i := range w.workers {
			r := rand.New(rand.NewPCG(w.seed, uint64(e)<<16|uint64(i)))
			wg.Go(func() {
				for n := 0; w.workers == 1 && n < 300 || w.workers > 1 && ctx.Err() == nil; n++ {
					w.step(r, i, e, n)
				}
			})
		}
		wg.Wait()
		cancel()
		w.checkQuiet(fmt.Sprintf("after epoch %d", e))
	}
	w.endAll()
	w.checkAnswers()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error(v)
	}
	for _, id := range w.suspects {
		t.Log(w.history(id))
	}
	t.Logf("%d calls, %d units", w.ops.Load(), len(w.units))
}

func (w *rworld) createAccount(s store.Store, name string, now time.Time) error {
	_, err := s.AccountCreate(w.ctx, store.AccountCreateParams{
		Name: name, TokenHash: hash(fmt.Sprintf("token of %s at %d", name, now.UnixMicro())), KeyID: 1,
		SealedKey: []byte("sealed key of " + name), Now: now,
	})
	return err
}

// step makes one random call.
func (w *rworld) step(r *rand.Rand, worker, epoch, n int) {
	id := fmt.Sprintf("w-%d-%d-%d", epoch, worker, n)
	switch k := r.IntN(100); {
	case k < 25:
		p := w.enqueueParams(r, id)
		if r.IntN(6) == 0 {
			w.retry(r, func(s store.Store) { w.enqueue(s, p) })
		} else {
			_, s := w.store(r)
			w.enqueue(s, p)
		}
	case k < 45:
		w.claim(r, fmt.Sprintf("c-%d-%d-%d", epoch, worker, n))
	case k < 62:
		u := w.pickUnit(r)
		if u == nil {
			return
		}
		p := w.completeParams(r, u)
		if r.IntN(5) == 0 {
			w.retry(r, func(s store.Store) { w.complete(s, p, u) })
		} else {
			_, s := w.store(r)
			w.complete(s, p, u)
		}
	case k < 70:
		u := w.pickUnit(r)
		if u == nil {
			return
		}
		p := store.WorkCancelParams{ID: u.id, Reason: "cancelled by " + id, Now: w.tick(r, 500)}
		if r.IntN(5) == 0 && !u.deadline.IsZero() {
			p.Now = u.deadline.Add(-time.Duration(r.IntN(2)) * time.Microsecond)
		}
		if r.IntN(5) == 0 {
			w.retry(r, func(s store.Store) { w.cancel(s, p, u) })
		} else {
			_, s := w.store(r)
			w.cancel(s, p, u)
		}
	case k < 78:
		w.expire(r)
	case k < 82:
		w.purge(r)
	case k < 85:
		w.deleteAccount(r)
	case k < 88:
		name := rAccounts[r.IntN(len(rAccounts))]
		_, s := w.store(r)
		if err := w.createAccount(s, name, w.tick(r, 500)); err != nil && !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrBeingDeleted) {
			w.unexpectedErr("AccountCreate "+name, err)
		}
	case k < 89 && r.IntN(8) == 0:
		w.endOpen(r)
	case k < 89 && r.IntN(8) == 1:
		// Many units on one account at once, so that its deletion has
		// more than a batch of them to move (sqlitestore moves 100 at a
		// time after the deletion commits).
		account := rAccounts[r.IntN(len(rAccounts))]
		_, s := w.store(r)
		for j := range 120 {
			p := w.enqueueParams(r, fmt.Sprintf("%s-b%d", id, j))
			p.Account, p.ClaimFor, p.IdempotencyKey = account, nil, ""
			w.enqueue(s, p)
		}
	default:
		w.read(r)
	}
}

// endOpen ends a few open units whatever their deadline, as a restore
// does (WorkEndOpen): rarely, since it ends the units others work on.
func (w *rworld) endOpen(r *rand.Rand) {
	now := w.tick(r, 500)
	p := store.WorkEndOpenParams{Reason: "restored", Now: now, Max: 1 + r.IntN(3)}
	_, s := w.store(r)
	start := w.begin()
	got, err := s.WorkEndOpen(w.ctx, p)
	end := w.seq.Add(1)
	what := fmt.Sprintf("WorkEndOpen(at %v, max %d) [%d,%d]", now.Sub(base), p.Max, start, end)
	if err != nil {
		w.unexpectedErr(what, err)
		return
	}
	if len(got) > p.Max {
		w.violate("%s ended %d units", what, len(got))
	}
	for _, x := range got {
		if x.State != store.StateTimedOut || !x.FinishedAt.Equal(now) || !strings.HasPrefix(x.Reason, p.Reason) {
			w.violate("%s answered unit %s %s, finished %v, reason %q", what, x.ID, x.State, x.FinishedAt.Sub(base), x.Reason)
		}
		w.mu.Lock()
		w.unit(x.ID).ends = append(w.unit(x.ID).ends, what)
		w.mu.Unlock()
		w.observe(start, end, what, x, false)
	}
}

// retry sends the same call two or three times at once, on both stores,
// as a caller does that lost the answer.
func (w *rworld) retry(r *rand.Rand, call func(s store.Store)) {
	var wg sync.WaitGroup
	for i := range 2 + r.IntN(2) {
		s := w.stores[(i+r.IntN(2))%2]
		if w.workers == 1 {
			call(s) // one at a time: the seed's calls in order
			continue
		}
		wg.Go(func() { call(s) })
	}
	wg.Wait()
}

func (w *rworld) enqueueParams(r *rand.Rand, id string) store.WorkEnqueueParams {
	now := w.tick(r, 500)
	deadlines := []time.Duration{3 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond, 2 * time.Second}
	p := store.WorkEnqueueParams{
		ID: id, Account: rAccounts[r.IntN(len(rAccounts))], KeyID: 1,
		SealedCommand: []byte("command of " + id), Now: now,
		Deadline:  now.Add(deadlines[r.IntN(len(deadlines))] + time.Duration(r.IntN(1000))*time.Microsecond),
		SyncLater: r.IntN(4) == 0,
	}
	if r.IntN(3) == 0 {
		p.IdempotencyKey = rKeys[r.IntN(len(rKeys))]
		p.IdempotencySince = base
		switch r.IntN(6) {
		case 0, 1:
			p.IdempotencySince = now.Add(-time.Duration(r.IntN(300)) * time.Millisecond)
		case 2:
			// The queue time of a unit stored with a key, exactly, or a
			// microsecond after it.
			if u := w.pickUnit(r); u != nil && u.key != "" && !u.queuedAt.IsZero() {
				p.IdempotencyKey, p.Account = u.key, u.account
				p.IdempotencySince = u.queuedAt.Add(time.Duration(r.IntN(2)) * time.Microsecond)
			}
		}
	}
	if r.IntN(6) == 0 {
		inst := rInstances[r.IntN(len(rInstances))]
		w.mu.Lock()
		w.nextClaim[inst]++
		poll := w.nextClaim[inst]
		w.mu.Unlock()
		p.ClaimFor = &store.ClaimRef{InstanceID: inst, ClaimID: "cf-" + id, ClaimPoll: store.ClaimPoll{Run: "run-" + inst, Poll: poll}}
	}
	return p
}

func (w *rworld) enqueue(s store.Store, p store.WorkEnqueueParams) {
	start := w.begin()
	got, err := s.WorkEnqueue(w.ctx, p)
	end := w.seq.Add(1)
	what := fmt.Sprintf("WorkEnqueue(%s, %s, key %q) [%d,%d]", p.ID, p.Account, p.IdempotencyKey, start, end)
	w.mu.Lock()
	u := w.unit(p.ID)
	u.account, u.key = p.Account, p.IdempotencyKey
	w.mu.Unlock()
	switch {
	case err == nil:
		want := store.Work{ID: p.ID, Account: p.Account, State: store.StateQueued, KeyID: p.KeyID, SealedCommand: p.SealedCommand,
			QueuedAt: p.Now, Deadline: p.Deadline}
		if c := p.ClaimFor; c != nil {
			want.State, want.ClaimedAt, want.InstanceID, want.ClaimID = store.StateClaimed, p.Now, c.InstanceID, c.ClaimID
		}
		for _, d := range diffWork(got, want) {
			w.violate("%s answered the unit with %s", what, d)
		}
		if got.IdempotencyKey != p.IdempotencyKey {
			w.violate("%s answered idempotency key %q", what, got.IdempotencyKey)
		}
		w.mu.Lock()
		u.created = append(u.created, what)
		u.enqStart, u.enqEnd, u.queuedAt, u.since, u.deadline = start, end, p.Now, p.IdempotencySince, p.Deadline
		if c := p.ClaimFor; c != nil {
			u.claims = append(u.claims, what)
			u.claimID, u.instance, u.poll = c.ClaimID, c.InstanceID, c.Poll
		}
		w.mu.Unlock()
		w.observe(start, end, what, got, true)
	case errors.Is(err, store.ErrDuplicate):
		if p.IdempotencyKey == "" {
			w.violate("%s: ErrDuplicate without a key", what)
		}
		if got.Account != p.Account || got.IdempotencyKey != p.IdempotencyKey || got.QueuedAt.Before(p.IdempotencySince) {
			w.violate("%s: ErrDuplicate with unit %s of account %q, key %q, queued at %v (since %v)", what, got.ID, got.Account, got.IdempotencyKey, got.QueuedAt, p.IdempotencySince)
		}
		w.observe(start, end, what+" duplicate", got, true)
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrNotFound):
	default:
		w.unexpectedErr(what, err, p.ID)
	}
}

func (w *rworld) claim(r *rand.Rand, prefix string) {
	account := rAccounts[r.IntN(len(rAccounts))]
	inst := rInstances[r.IntN(len(rInstances))]
	_, s := w.store(r)
	now := w.tick(r, 500)
	w.mu.Lock()
	w.nextClaim[inst]++
	poll := w.nextClaim[inst]
	w.mu.Unlock()
	if r.IntN(2) == 0 {
		if err := s.InstanceSeen(w.ctx, store.InstanceSeenParams{Account: account, InstanceID: inst, Hostname: inst, Version: "v1",
			Run: "run-" + inst, PollSeq: poll, Now: now, MaxPerAccount: 16, EvictBefore: now.Add(-time.Second)}); err != nil && !errors.Is(err, store.ErrTooManyInstances) {
			w.unexpectedErr("InstanceSeen", err)
		}
	}
	p := store.WorkClaimParams{Account: account, InstanceID: inst, Max: 1 + r.IntN(3), Now: now,
		ClaimPoll: store.ClaimPoll{Run: "run-" + inst, Poll: poll}, Expect: r.IntN(2) == 0}
	if r.IntN(4) == 0 {
		p.MaxBytes = 1 + r.IntN(40)
	}
	p.ClaimIDs = claimIDs(prefix, p.Max)
	start := w.begin()
	got, err := s.WorkClaim(w.ctx, p)
	end := w.seq.Add(1)
	what := fmt.Sprintf("WorkClaim(%s, %s, max %d, at %v) [%d,%d]", account, inst, p.Max, now.Sub(base), start, end)
	if err != nil {
		w.unexpectedErr(what, err)
		return
	}
	if len(got) > p.Max {
		w.violate("%s claimed %d units", what, len(got))
	}
	for i, x := range got {
		if x.State != store.StateClaimed || x.Account != account || x.InstanceID != inst || i >= len(p.ClaimIDs) || x.ClaimID != p.ClaimIDs[i] ||
			!x.Deadline.After(now) || x.ClaimedAt.Before(x.QueuedAt) {
			w.violate("%s answered unit %s %s of %q by %q under %q, deadline %v, claimed at %v", what, x.ID, x.State, x.Account, x.InstanceID, x.ClaimID, x.Deadline.Sub(base), x.ClaimedAt.Sub(base))
		}
		if i > 0 && (x.QueuedAt.Before(got[i-1].QueuedAt) || x.QueuedAt.Equal(got[i-1].QueuedAt) && x.ID < got[i-1].ID) {
			w.violate("%s: not oldest first: %s after %s", what, x.ID, got[i-1].ID)
		}
		w.mu.Lock()
		u := w.unit(x.ID)
		u.claims = append(u.claims, what)
		u.claimID, u.instance, u.poll = x.ClaimID, inst, poll
		w.mu.Unlock()
		w.observe(start, end, what, x, true)
	}
	if r.IntN(3) == 0 {
		from := max(poll-int64(r.IntN(5)), 0)
		cp := store.WorkClaimedByPollsParams{Account: account, InstanceID: inst, Run: "run-" + inst, FromPoll: from, ToPoll: poll}
		start := w.begin()
		ws, err := s.WorkClaimedByPolls(w.ctx, cp)
		end := w.seq.Add(1)
		what := fmt.Sprintf("WorkClaimedByPolls(%s, %s, %d..%d) [%d,%d]", account, inst, from, poll, start, end)
		if err != nil {
			w.unexpectedErr(what, err)
			return
		}
		for _, x := range ws {
			w.mu.Lock()
			u := w.units[x.ID]
			// The claim's own answer may not be recorded yet (another
			// worker's claim): check the poll when it is.
			bad := u != nil && u.claimID != "" && u.claimID == x.ClaimID && (u.poll < from || u.poll > poll || u.instance != inst)
			upoll := int64(-1)
			if u != nil {
				upoll = u.poll
			}
			w.mu.Unlock()
			if bad || x.State != store.StateClaimed || x.InstanceID != inst || x.Account != account {
				w.violate("%s answered unit %s %s by %q of %q (claimed for poll %d)", what, x.ID, x.State, x.InstanceID, x.Account, upoll)
			}
			w.observe(start, end, what, x, true)
		}
	}
}

func (w *rworld) completeParams(r *rand.Rand, u *rUnit) store.WorkCompleteParams {
	states := []store.State{store.StateSucceeded, store.StateFailed, store.StateCancelled}
	p := store.WorkCompleteParams{ID: u.id, ClaimID: u.claimID, State: states[r.IntN(3)],
		SealedResult: fmt.Appendf(nil, "result %d of %s", r.Uint32(), u.id), Reason: "", Now: w.tick(r, 500)}
	switch k := r.IntN(10); {
	case k == 0:
		p.ClaimID = "not-" + u.claimID
	case k == 1:
		p.Now = p.Now.Add(time.Duration(r.IntN(500)) * time.Millisecond)
	case k == 4 && !u.deadline.IsZero():
		// At the deadline exactly (refused), or a microsecond before.
		p.Now = u.deadline.Add(-time.Duration(r.IntN(2)) * time.Microsecond)
	case k == 2:
		p.Account = u.account
	case k == 3:
		p.Account = rAccounts[r.IntN(len(rAccounts))]
	}
	if p.State == store.StateFailed {
		p.Reason = "could not run"
	}
	return p
}

func (w *rworld) complete(s store.Store, p store.WorkCompleteParams, u *rUnit) {
	start := w.begin()
	got, err := s.WorkComplete(w.ctx, p)
	end := w.seq.Add(1)
	what := fmt.Sprintf("WorkComplete(%s, claim %q, %s, account %q, at %v) [%d,%d]", p.ID, p.ClaimID, p.State, p.Account, p.Now.Sub(base), start, end)
	switch {
	case err == nil:
		if got.State != p.State || got.ClaimID != p.ClaimID || p.ClaimID == "" || !bytes.Equal(got.SealedResult, p.SealedResult) ||
			!got.FinishedAt.Equal(p.Now) || !got.Deadline.After(p.Now) || p.Account != "" && got.Account != p.Account {
			w.violate("%s accepted: unit %s %s under %q, deadline %v, finished %v, account %q", what, got.ID, got.State, got.ClaimID, got.Deadline.Sub(base), got.FinishedAt.Sub(base), got.Account)
		}
		w.mu.Lock()
		uu := w.unit(p.ID)
		uu.ends = append(uu.ends, what)
		if uu.claimID != "" && uu.claimID != p.ClaimID {
			w.violateLocked("%s accepted a claim id other than the claim's %q", what, uu.claimID)
		}
		w.mu.Unlock()
		w.observe(start, end, what, got, true)
	case errors.Is(err, store.ErrClaimMismatch):
		if got.ID != "" && (got.State != store.StateClaimed || got.ClaimID == p.ClaimID) {
			w.violate("%s: ErrClaimMismatch with the unit %s under %q", what, got.State, got.ClaimID)
		}
		w.observe(start, end, what+" refused", got, true)
	case errors.Is(err, store.ErrNotClaimable):
		if got.ID != "" && got.State == store.StateClaimed && (got.ClaimID != p.ClaimID || got.Deadline.After(p.Now)) {
			w.violate("%s: ErrNotClaimable with the unit claimed under %q, deadline %v", what, got.ClaimID, got.Deadline.Sub(base))
		}
		w.observe(start, end, what+" refused", got, true)
	case errors.Is(err, store.ErrNotFound):
		if p.Account == "" && u.account != "" && len(u.created) > 0 {
			w.mu.Lock()
			w.unit(p.ID).gone = append(w.unit(p.ID).gone, rGone{start, end, what})
			w.mu.Unlock()
		}
	default:
		w.unexpectedErr(what, err, p.ID)
	}
}

func (w *rworld) cancel(s store.Store, p store.WorkCancelParams, u *rUnit) {
	start := w.begin()
	got, err := s.WorkCancel(w.ctx, p)
	end := w.seq.Add(1)
	what := fmt.Sprintf("WorkCancel(%s, at %v) [%d,%d]", p.ID, p.Now.Sub(base), start, end)
	switch {
	case err == nil:
		if got.State != store.StateCancelled || !got.Deadline.After(p.Now) || !got.FinishedAt.Equal(p.Now) || got.Reason != p.Reason {
			w.violate("%s accepted: unit %s, deadline %v, finished %v, reason %q", what, got.State, got.Deadline.Sub(base), got.FinishedAt.Sub(base), got.Reason)
		}
		w.mu.Lock()
		w.unit(p.ID).ends = append(w.unit(p.ID).ends, what)
		w.mu.Unlock()
		w.observe(start, end, what, got, true)
	case errors.Is(err, store.ErrNotClaimable):
		// Unless no enqueue of it had said it stored it when the cancel
		// was sent (a copy of a retried enqueue failed; another may still
		// be storing it): pgstore reads the unit it refuses after its
		// update, so a unit stored in between is refused as if past its
		// deadline.
		if !got.State.Terminal() && got.Deadline.After(p.Now) && len(u.created) > 0 {
			w.violate("%s refused a unit %s whose deadline %v is ahead", what, got.State, got.Deadline.Sub(base))
		}
		w.observe(start, end, what+" refused", got, true)
	case errors.Is(err, store.ErrNotFound):
		w.mu.Lock()
		w.unit(p.ID).gone = append(w.unit(p.ID).gone, rGone{start, end, what})
		w.mu.Unlock()
	default:
		w.unexpectedErr(what, err, p.ID)
	}
}

func (w *rworld) expire(r *rand.Rand) {
	now := w.tick(r, 500)
	if r.IntN(3) == 0 {
		now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
	}
	p := store.WorkExpireParams{Now: now, OnlineSince: now.Add(-time.Second), Max: r.IntN(6)}
	if u := w.pickUnit(r); u != nil && r.IntN(3) == 0 {
		p.ID = u.id
		if r.IntN(2) == 0 && !u.deadline.IsZero() {
			// At its deadline exactly (due), or a microsecond before.
			p.Now = u.deadline.Add(-time.Duration(r.IntN(2)) * time.Microsecond)
			p.OnlineSince = p.Now.Add(-time.Second)
		}
	}
	_, s := w.store(r)
	start := w.begin()
	got, err := s.WorkExpire(w.ctx, p)
	end := w.seq.Add(1)
	now = p.Now
	what := fmt.Sprintf("WorkExpire(at %v, max %d, id %q) [%d,%d]", now.Sub(base), p.Max, p.ID, start, end)
	if err != nil {
		w.unexpectedErr(what, err)
		return
	}
	extra := 0
	for _, x := range got {
		if x.ID == p.ID {
			extra = 1
		}
	}
	if p.Max > 0 && len(got) > p.Max+extra {
		w.violate("%s ended %d units", what, len(got))
	}
	for _, x := range got {
		if x.State != store.StateTimedOut || x.Deadline.After(now) || !x.FinishedAt.Equal(now) || x.Reason == "" {
			w.violate("%s answered unit %s %s, deadline %v, finished %v, reason %q", what, x.ID, x.State, x.Deadline.Sub(base), x.FinishedAt.Sub(base), x.Reason)
		}
		if x.ClaimID != "" && !strings.Contains(x.Reason, x.InstanceID) {
			w.violate("%s: unit %s claimed by %q has reason %q", what, x.ID, x.InstanceID, x.Reason)
		}
		w.mu.Lock()
		w.unit(x.ID).ends = append(w.unit(x.ID).ends, what)
		w.mu.Unlock()
		w.observe(start, end, what, x, false)
	}
}

func (w *rworld) purge(r *rand.Rand) {
	before := w.now().Add(-time.Duration(r.IntN(3000)) * time.Millisecond)
	_, s := w.store(r)
	start := w.begin()
	n, err := s.WorkPurge(w.ctx, store.WorkPurgeParams{QueuedBefore: before, Max: 1 + r.IntN(20)})
	end := w.seq.Add(1)
	w.mu.Lock()
	w.purges = append(w.purges, rPurge{start, end, before})
	w.mu.Unlock()
	if err != nil || n < 0 {
		w.unexpectedErr(fmt.Sprintf("WorkPurge(before %v) = %d", before.Sub(base), n), err)
	}
}

func (w *rworld) deleteAccount(r *rand.Rand) {
	name := rAccounts[r.IntN(len(rAccounts))]
	now := w.tick(r, 500)
	_, s := w.store(r)
	start := w.begin()
	d, err := s.AccountDelete(w.ctx, store.AccountDeleteParams{Name: name, Reason: "account deleted", Now: now})
	end := w.seq.Add(1)
	what := fmt.Sprintf("AccountDelete(%s, at %v) [%d,%d]", name, now.Sub(base), start, end)
	switch {
	case err == nil && d.Resumed:
		// The account was being deleted (sqlitestore moves its units in
		// batches after the deletion commits): this call moved the rest.
		if of, ok := store.DeletedAccount(d.Tombstone); !ok || of != name || !d.DeletedAt.Before(now) || len(d.Cancelled) > 0 {
			w.violate("%s: resumed a deletion: tombstone %q deleted at %v, %d cancelled", what, d.Tombstone, d.DeletedAt.Sub(base), len(d.Cancelled))
		}
	case err == nil:
		w.mu.Lock()
		w.deletes = append(w.deletes, rDelete{name, start, end, d.Tombstone})
		w.mu.Unlock()
		if d.Tombstone != store.DeletedAccountName(name, now) {
			w.violate("%s: tombstone %q", what, d.Tombstone)
		}
		for _, x := range d.Cancelled {
			if x.State != store.StateCancelled || x.Account != d.Tombstone || !x.FinishedAt.Equal(now) {
				w.violate("%s cancelled unit %s: %s of %q, finished %v", what, x.ID, x.State, x.Account, x.FinishedAt.Sub(base))
			}
			w.mu.Lock()
			w.unit(x.ID).ends = append(w.unit(x.ID).ends, what)
			w.mu.Unlock()
			w.observe(start, end, what, x, true)
		}
		if r.IntN(2) == 0 {
			if err := w.createAccount(w.stores[r.IntN(2)], name, w.tick(r, 500)); err != nil && !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrBeingDeleted) {
				w.unexpectedErr("AccountCreate "+name+" after its deletion", err)
			}
		}
	case errors.Is(err, store.ErrNotFound):
	default:
		w.unexpectedErr(what, err)
	}
}

// read makes a random read and records the units it answers.
func (w *rworld) read(r *rand.Rand) {
	_, s := w.store(r)
	switch r.IntN(4) {
	case 0:
		u := w.pickUnit(r)
		if u == nil {
			return
		}
		start := w.begin()
		got, err := s.WorkGet(w.ctx, u.id)
		end := w.seq.Add(1)
		switch {
		case err == nil:
			w.observe(start, end, fmt.Sprintf("WorkGet [%d,%d]", start, end), got, true)
		case errors.Is(err, store.ErrNotFound):
			w.mu.Lock()
			w.unit(u.id).gone = append(w.unit(u.id).gone, rGone{start, end, fmt.Sprintf("WorkGet(%s) [%d,%d]", u.id, start, end)})
			w.mu.Unlock()
		default:
			w.unexpectedErr("WorkGet "+u.id, err)
		}
	case 1:
		account, key := rAccounts[r.IntN(len(rAccounts))], rKeys[r.IntN(len(rKeys))]
		start := w.begin()
		got, err := s.WorkByIdempotencyKey(w.ctx, account, key, base)
		end := w.seq.Add(1)
		switch {
		case err == nil:
			if got.Account != account || got.IdempotencyKey != key {
				w.violate("WorkByIdempotencyKey(%s, %s) answered unit %s of %q with key %q", account, key, got.ID, got.Account, got.IdempotencyKey)
			}
			w.observe(start, end, fmt.Sprintf("WorkByIdempotencyKey [%d,%d]", start, end), got, true)
		case errors.Is(err, store.ErrNotFound):
		default:
			w.unexpectedErr("WorkByIdempotencyKey", err)
		}
	case 2:
		p := store.WorkListParams{Limit: 1 + r.IntN(50), WithoutSealed: r.IntN(2) == 0}
		if r.IntN(3) > 0 {
			p.Account = rAccounts[r.IntN(len(rAccounts))]
		}
		if r.IntN(2) == 0 {
			p.State = []store.State{store.StateQueued, store.StateClaimed, store.StateSucceeded, store.StateTimedOut, store.StateCancelled, store.StateFailed}[r.IntN(6)]
		}
		start := w.begin()
		got, err := s.WorkList(w.ctx, p)
		end := w.seq.Add(1)
		if err != nil {
			w.unexpectedErr("WorkList", err)
			return
		}
		what := fmt.Sprintf("WorkList(%q, %q) [%d,%d]", p.Account, p.State, start, end)
		for i, x := range got {
			if p.State != "" && x.State != p.State || p.Account != "" && !store.OfAccount(x.Account, p.Account) {
				w.violate("%s listed unit %s %s of %q", what, x.ID, x.State, x.Account)
			}
			if i > 0 && (x.QueuedAt.After(got[i-1].QueuedAt) || x.QueuedAt.Equal(got[i-1].QueuedAt) && x.ID > got[i-1].ID) {
				w.violate("%s: not newest first: %s after %s", what, x.ID, got[i-1].ID)
			}
			w.observe(start, end, what, x, !p.WithoutSealed)
		}
	case 3:
		var ids []string
		for range 1 + r.IntN(8) {
			if u := w.pickUnit(r); u != nil {
				ids = append(ids, u.id)
			}
		}
		account := rAccounts[r.IntN(len(rAccounts))]
		start := w.begin()
		got, err := s.WorkStates(w.ctx, account, ids)
		end := w.seq.Add(1)
		if err != nil {
			w.unexpectedErr("WorkStates", err)
			return
		}
		for id, st := range got {
			if !st.Valid() {
				w.violate("WorkStates(%s) [%d,%d]: unit %s in state %q", account, start, end, id, st)
			}
			// A state alone: an observation with only the state set.
			w.mu.Lock()
			u := w.unit(id)
			u.obs = append(u.obs, rObs{start: start, end: end, via: fmt.Sprintf("WorkStates(%s) [%d,%d]", account, start, end), w: store.Work{ID: id, State: st}})
			w.mu.Unlock()
		}
	}
}

// checkQuiet checks, while no call is under way, that both stores answer
// the same and that listings, counts and reads agree with each other.
func (w *rworld) checkQuiet(when string) {
	var lists [2]map[string]store.Work
	for si, s := range w.stores {
		start := w.begin()
		all, err := s.WorkList(w.ctx, store.WorkListParams{Limit: 1 << 30})
		end := w.seq.Add(1)
		if err != nil {
			w.unexpectedErr(when+": WorkList", err)
			return
		}
		lists[si] = map[string]store.Work{}
		for _, x := range all {
			lists[si][x.ID] = x
			w.observe(start, end, fmt.Sprintf("%s: WorkList of store %d [%d,%d]", when, si, start, end), x, true)
		}
		// Every unit read by id is the one listed.
		w.mu.Lock()
		ids := slices.Clone(w.unitIDs)
		w.mu.Unlock()
		for _, id := range ids {
			got, err := s.WorkGet(w.ctx, id)
			x, listed := lists[si][id]
			switch {
			case err == nil && !listed:
				w.violate("%s: store %d: WorkGet finds unit %s that WorkList does not list", when, si, id)
			case err == nil:
				for _, d := range diffWork(got, x) {
					w.violate("%s: store %d: unit %s: WorkGet and WorkList differ: %s", when, si, id, d)
				}
			case errors.Is(err, store.ErrNotFound) && listed:
				w.violate("%s: store %d: WorkList lists unit %s that WorkGet does not find", when, si, id)
			case errors.Is(err, store.ErrNotFound):
				w.mu.Lock()
				w.unit(id).gone = append(w.unit(id).gone, rGone{start, end, fmt.Sprintf("%s: WorkGet(%s) of store %d", when, id, si)})
				w.mu.Unlock()
			default:
				w.unexpectedErr(when+": WorkGet "+id, err)
			}
		}
		// Counts.
		var next time.Time
		for _, x := range all {
			if !x.State.Terminal() && (next.IsZero() || x.Deadline.Before(next)) {
				next = x.Deadline
			}
		}
		d, ok, err := s.WorkNextDeadline(w.ctx)
		if err != nil {
			w.unexpectedErr(when+": WorkNextDeadline", err)
		} else if ok != !next.IsZero() || ok && !d.Equal(next) {
			w.violate("%s: store %d: WorkNextDeadline = %v, %v; the open units' earliest is %v", when, si, d, ok, next)
		}
		stats, err := s.AccountStats(w.ctx, store.AccountStatsParams{OnlineSince: w.now().Add(-time.Second)})
		if err != nil {
			w.unexpectedErr(when+": AccountStats", err)
			return
		}
		for _, st := range stats {
			var queued, claimed int
			var oldest time.Time
			var ids []string
			byInstance := map[string]int{}
			for _, x := range all {
				if x.Account != st.Account {
					continue
				}
				ids = append(ids, x.ID)
				switch x.State {
				case store.StateQueued:
					queued++
					if oldest.IsZero() || x.QueuedAt.Before(oldest) {
						oldest = x.QueuedAt
					}
				case store.StateClaimed:
					claimed++
					byInstance[x.InstanceID]++
				}
			}
			if st.Queued != queued || st.Claimed != claimed || !st.OldestQueuedAt.Equal(oldest) {
				w.violate("%s: store %d: AccountStats(%s) = queued %d (oldest %v), claimed %d; the listing holds %d (oldest %v), %d",
					when, si, st.Account, st.Queued, st.OldestQueuedAt, st.Claimed, queued, oldest, claimed)
			}
			if n, err := s.WorkQueuedCount(w.ctx, st.Account, 0); err != nil {
				w.unexpectedErr(when+": WorkQueuedCount", err)
			} else if n != queued {
				w.violate("%s: store %d: WorkQueuedCount(%s) = %d, the listing holds %d queued", when, si, st.Account, n, queued)
			}
			for _, state := range []store.State{store.StateQueued, store.StateClaimed, store.StateCancelled} {
				ws, err := s.WorkList(w.ctx, store.WorkListParams{Account: st.Account, State: state, Limit: 1 << 30})
				if err != nil {
					w.unexpectedErr(when+": WorkList", err)
					continue
				}
				want := 0
				for _, x := range all {
					if x.Account == st.Account && x.State == state {
						want++
					}
				}
				if len(ws) != want {
					w.violate("%s: store %d: WorkList(%s, %s) lists %d units, the whole listing %d", when, si, st.Account, state, len(ws), want)
				}
			}
			ins, err := s.InstanceList(w.ctx, st.Account)
			if err != nil {
				w.unexpectedErr(when+": InstanceList", err)
			}
			for _, in := range ins {
				if in.InFlight != byInstance[in.InstanceID] {
					w.violate("%s: store %d: InstanceList(%s): %s has %d in flight; the listing holds %d claimed by it", when, si, st.Account, in.InstanceID, in.InFlight, byInstance[in.InstanceID])
				}
			}
			states, err := s.WorkStates(w.ctx, st.Account, ids)
			if err != nil {
				w.unexpectedErr(when+": WorkStates", err)
			}
			for _, id := range ids {
				if states[id] != lists[si][id].State {
					w.violate("%s: store %d: WorkStates(%s)[%s] = %q, listed %s", when, si, st.Account, id, states[id], lists[si][id].State)
				}
			}
		}
	}
	for id, x := range lists[0] {
		y, ok := lists[1][id]
		if !ok {
			w.violate("%s: unit %s is listed by store 0 only", when, id)
			continue
		}
		for _, d := range diffWork(x, y) {
			w.violate("%s: unit %s: the stores differ: %s", when, id, d)
		}
	}
	for id := range lists[1] {
		if _, ok := lists[0][id]; !ok {
			w.violate("%s: unit %s is listed by store 1 only", when, id)
		}
	}
	// Every unit listed was stored by a call that said so.
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range lists[0] {
		u := w.units[id]
		if u == nil || len(u.created) == 0 && !u.unknown {
			w.violateLocked("%s: unit %s is listed, but no enqueue said it stored it", when, id)
		}
	}
}

// endAll ends every unit (an expiry far past every deadline) and checks
// that none is left open (always ends).
func (w *rworld) endAll() {
	now := w.tick(rand.New(rand.NewPCG(w.seed, 1)), 10).Add(time.Hour)
	start := w.begin()
	got, err := w.stores[1].WorkExpire(w.ctx, store.WorkExpireParams{Now: now})
	end := w.seq.Add(1)
	if err != nil {
		w.unexpectedErr("final WorkExpire", err)
		return
	}
	for _, x := range got {
		w.mu.Lock()
		w.unit(x.ID).ends = append(w.unit(x.ID).ends, fmt.Sprintf("final WorkExpire [%d,%d]", start, end))
		w.mu.Unlock()
		w.observe(start, end, fmt.Sprintf("final WorkExpire [%d,%d]", start, end), x, false)
	}
	w.checkQuiet("at the end")
	all, err := w.stores[0].WorkList(w.ctx, store.WorkListParams{Limit: 1 << 30, WithoutSealed: true})
	if err != nil {
		w.unexpectedErr("final WorkList", err)
		return
	}
	w.final = map[string]store.Work{}
	for _, x := range all {
		w.final[x.ID] = x
		if !x.State.Terminal() {
			w.violate("at the end: unit %s is still %s after an expiry past every deadline", x.ID, x.State)
		}
	}
}

// checkAnswers checks the answers of the whole round against each other.
func (w *rworld) checkAnswers() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range w.unitIDs {
		u := w.units[id]
		if len(u.created) > 1 {
			w.violateLocked("unit %s stored %d times: %v", id, len(u.created), u.created)
		}
		if len(u.claims) > 1 {
			w.violateLocked("unit %s claimed %d times (at most once): %v", id, len(u.claims), u.claims)
		}
		if len(u.ends) > 1 {
			w.violateLocked("unit %s ended %d times: %v", id, len(u.ends), u.ends)
		}
		var claimIDs, instances []string
		var term *rObs
		ended := false
		for i := range u.obs {
			o := &u.obs[i]
			x := o.w
			if !x.State.Valid() {
				w.violateLocked("unit %s: %s answered state %q", id, o.via, x.State)
			}
			if x.ClaimID != "" && !slices.Contains(claimIDs, x.ClaimID) {
				claimIDs = append(claimIDs, x.ClaimID)
			}
			if x.InstanceID != "" && !slices.Contains(instances, x.InstanceID) {
				instances = append(instances, x.InstanceID)
			}
			if x.State.Terminal() {
				ended = true
			}
			if x.Account != "" && u.account != "" && x.Account != u.account {
				if name, ok := store.DeletedAccount(x.Account); !ok || name != u.account {
					w.violateLocked("unit %s of %s: %s answered it of account %q", id, u.account, o.via, x.Account)
				}
			}
			if len(u.created) == 1 && x.Deadline != (time.Time{}) && !x.Deadline.Equal(u.deadline) {
				w.violateLocked("unit %s with deadline %v: %s answered deadline %v", id, u.deadline.Sub(base), o.via, x.Deadline.Sub(base))
			}
			if len(u.created) == 1 && x.Deadline != (time.Time{}) && !x.QueuedAt.Equal(u.queuedAt) {
				w.violateLocked("unit %s queued at %v: %s answered queued at %v", id, u.queuedAt.Sub(base), o.via, x.QueuedAt.Sub(base))
			}
			if x.State.Terminal() && x.Deadline != (time.Time{}) {
				if term == nil {
					term = o
				} else if x.State != term.w.State || !x.FinishedAt.Equal(term.w.FinishedAt) || x.Reason != term.w.Reason ||
					o.sealed && term.sealed && !bytes.Equal(x.SealedResult, term.w.SealedResult) {
					w.violateLocked("unit %s ended twice: %s answered %s at %v (%q, result %q), %s answered %s at %v (%q, result %q)", id,
						term.via, term.w.State, term.w.FinishedAt.Sub(base), term.w.Reason, term.w.SealedResult,
						o.via, x.State, x.FinishedAt.Sub(base), x.Reason, x.SealedResult)
				}
			}
			// An answer given after an answer that the unit ended (or
			// was claimed) ended: never an earlier state.
			for j := range u.obs {
				p := &u.obs[j]
				if p.end >= o.start {
					continue
				}
				if p.w.State.Terminal() && !x.State.Terminal() || p.w.State == store.StateClaimed && x.State == store.StateQueued {
					w.violateLocked("unit %s went back: %s answered %s, then %s answered %s", id, p.via, p.w.State, o.via, x.State)
				}
			}
		}
		if len(claimIDs) > 1 || len(instances) > 1 {
			w.violateLocked("unit %s answered under claim ids %v, instances %v", id, claimIDs, instances)
		}
		if len(claimIDs) == 1 && u.claimID != "" && claimIDs[0] != u.claimID {
			w.violateLocked("unit %s claimed under %q, answered under %q", id, u.claimID, claimIDs[0])
		}
		if ended && len(u.ends) == 0 && !u.unknown {
			w.violateLocked("unit %s ended, but no call said it ended it", id)
		}
		// A unit found no longer: purged (ended, queued before a purge's
		// cut) or never stored.
		for _, g := range u.gone {
			// Not a call made while the unit was being stored (its id
			// known from a copy of a retried enqueue that failed).
			if len(u.created) == 0 || g.start < u.enqEnd {
				continue
			}
			ok := false
			for _, p := range w.purges {
				if p.start < g.end && u.queuedAt.Before(p.queuedBefore) {
					ok = true
				}
			}
			if !ok || !ended {
				w.violateLocked("unit %s (queued at %v): %s did not find it: no purge could have deleted it (ended %v)", id, u.queuedAt.Sub(base), g.via, ended)
			}
		}
		// A unit stored before its account's deletion began is ended by it.
		for _, d := range w.deletes {
			if d.name != u.account || len(u.created) == 0 || u.enqEnd >= d.start {
				continue
			}
			for _, o := range u.obs {
				if o.start > d.end && o.w.Deadline != (time.Time{}) && (!o.w.State.Terminal() || o.w.Account == u.account) {
					w.violateLocked("unit %s stored before %s's deletion [%d,%d]: %s answered it %s of %q", id, d.name, d.start, d.end, o.via, o.w.State, o.w.Account)
				}
			}
		}
	}
	// An idempotency key counts once per account: a unit stored with a key
	// while another stored with it (at or after the since of the call)
	// was still of the account is a second unit for one key.
	type ak struct{ account, key string }
	final := map[ak][]*rUnit{}
	createdKeyed := map[ak][]*rUnit{}
	for _, id := range w.unitIDs {
		u := w.units[id]
		if u.key != "" && len(u.created) > 0 {
			createdKeyed[ak{u.account, u.key}] = append(createdKeyed[ak{u.account, u.key}], u)
		}
		last, ok := w.final[id]
		if u.key == "" || len(u.created) == 0 || !ok {
			continue
		}
		if last.Account == u.account {
			final[ak{u.account, u.key}] = append(final[ak{u.account, u.key}], u)
		}
	}
	// And one stored with a key after another of the account was (both
	// still of it at the end, so no deletion between), which was queued at
	// or after the since of the second's enqueue, is a second unit too.
	for k, us := range final {
		for _, u1 := range us {
			for _, u2 := range us {
				// An enqueue whose since was after u1's queue time forgot
				// u1's key (aged out): a later one makes a new unit.
				forgotten := slices.ContainsFunc(createdKeyed[k], func(x *rUnit) bool { return x.since.After(u1.queuedAt) && x.enqStart < u2.enqEnd })
				if u1.enqEnd < u2.enqStart && !u1.queuedAt.Before(u2.since) && !forgotten {
					w.violateLocked("account %s: unit %s stored with key %q (queued at %v), then unit %s with it too (since %v)",
						k.account, u1.id, k.key, u1.queuedAt.Sub(base), u2.id, u2.since.Sub(base))
				}
			}
		}
	}
	for k, us := range final {
		if len(us) > 1 && k.key != "" {
			// Keys aged out (a later since) make a new unit legitimately;
			// the stored keys say which still count.
			n := 0
			var names []string
			for _, u := range us {
				if w.final[u.id].IdempotencyKey == k.key {
					n++
					names = append(names, u.id)
				}
			}
			if n > 1 {
				w.violateLocked("account %s holds %d units with idempotency key %q: %v", k.account, n, k.key, names)
			}
		}
	}
}
