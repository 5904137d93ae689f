package server

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestListedCacheKeepsAtMostItsBoundDroppingTheLeastRecentlyUsed: past its
// bound the cache drops the unit used longest ago, not one just read.
func TestListedCacheKeepsAtMostItsBoundDroppingTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	c := newListedCache(3)
	set := func(e *listedEntry) { e.script, e.scriptKnown = "x.sh", true }
	for _, id := range []string{"w1", "w2", "w3"} {
		c.put(id, "acme", set)
	}
	if _, ok := c.get("w1", "acme"); !ok { // w1 is now the most recent
		t.Fatal("w1 not kept")
	}
	for i := range 10 {
		c.put(fmt.Sprintf("n%d", i), "acme", set)
		if c.len() > 3 {
			t.Fatalf("%d entries kept, bound 3", c.len())
		}
	}
	for _, id := range []string{"w1", "w2", "w3", "n6"} {
		if _, ok := c.get(id, "acme"); ok {
			t.Errorf("%s still kept after 10 newer units", id)
		}
	}
	c = newListedCache(3)
	c.put("w1", "acme", set)
	c.put("w2", "acme", set)
	c.put("w3", "acme", set)
	c.get("w1", "acme")
	c.put("w4", "acme", set)
	if _, ok := c.get("w2", "acme"); ok {
		t.Error("w2, the least recently used, was kept")
	}
	if _, ok := c.get("w1", "acme"); !ok {
		t.Error("w1, read last, was dropped")
	}
}

// listedEnv is a server on a SQLite store with account acme.
type listedEnv struct {
	t   *testing.T
	s   *Server
	st  store.Store
	key crypto.Key
	now time.Time
}

func newListedEnv(t *testing.T) *listedEnv {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	master, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := master.SealKey("acme", key)
	if err != nil {
		t.Fatal(err)
	}
	e := &listedEnv{t: t, st: st, key: key, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if _, err := st.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("t"), KeyID: 1, SealedKey: sealed, Now: e.now}); err != nil {
		t.Fatal(err)
	}
	e.s, err = New(Options{Store: st, MasterKey: master, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *listedEnv) seal(id string, dir crypto.Direction, m proto.Message) []byte {
	e.t.Helper()
	plain, err := proto.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	blob, err := crypto.Seal(e.key, "acme", id, dir, plain)
	if err != nil {
		e.t.Fatal(err)
	}
	return blob
}

// unit queues unit id of acme running script and ends it in state with
// sealedResult (nil for none).
func (e *listedEnv) unit(id, script string, state store.State, sealedResult []byte) store.Work {
	e.t.Helper()
	ctx := e.t.Context()
	if _, err := e.st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, Now: e.now, Deadline: e.now.Add(time.Hour),
		SealedCommand: e.seal(id, crypto.DirCommand, &automatorv1.Command{Script: script})}); err != nil {
		e.t.Fatal(err)
	}
	ws, err := e.st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "a-1", Max: 1, ClaimIDs: []string{"c-" + id}, Now: e.now})
	if err != nil || len(ws) != 1 || ws[0].ID != id {
		e.t.Fatalf("claim of %s: %v %v", id, ws, err)
	}
	w, err := e.st.WorkComplete(ctx, store.WorkCompleteParams{ID: id, ClaimID: "c-" + id, Account: "acme", State: state,
		SealedResult: sealedResult, Reason: "the proxy could not run the command", Now: e.now})
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// TestListedOutcomeIsOpenedOnceThenKept: a listing's second read of an
// ended unit takes the outcome kept from the first, not the blob (here
// replaced by one that would not open); a unit listed without its blobs
// is read again and opened; a failure's reason is kept like an exit code.
func TestListedOutcomeIsOpenedOnceThenKept(t *testing.T) {
	t.Parallel()
	e := newListedEnv(t)
	ctx := t.Context()
	ran := e.unit("w_ran", "report.sh", store.StateSucceeded, e.seal("w_ran", crypto.DirResult, &automatorv1.Result{ExitCode: 7, Stdout: make([]byte, 64<<10)}))
	failed := e.unit("w_failed", "gone.sh", store.StateFailed, e.seal("w_failed", crypto.DirResult, &automatorv1.Result{Failure: `unknown script "gone.sh"`}))

	if o, err := e.s.ListedOutcome(ctx, ran); err != nil || o == nil || o.ExitCode != 7 {
		t.Fatalf("first read: %+v, %v; want exit code 7", o, err)
	}
	altered := ran
	altered.SealedResult = append([]byte(nil), ran.SealedResult...)
	altered.SealedResult[len(altered.SealedResult)-1] ^= 1
	if o, err := e.s.ListedOutcome(ctx, altered); err != nil || o == nil || o.ExitCode != 7 {
		t.Errorf("second read: %+v, %v; want exit code 7, as kept", o, err)
	}

	bare := failed
	bare.SealedResult, bare.SealedCommand = nil, nil
	if o, err := e.s.ListedOutcome(ctx, bare); err != nil || o == nil || o.Failure != `unknown script "gone.sh"` {
		t.Errorf("a failed unit listed without its blobs: %+v, %v; want its reason", o, err)
	}
	if script, err := e.s.ListedScript(ctx, bare); err != nil || script != "gone.sh" {
		t.Errorf("its script: %q, %v; want gone.sh", script, err)
	}
	if e.s.listed.len() != 2 {
		t.Errorf("%d units kept, want 2", e.s.listed.len())
	}

	// One that ended with no result (its command did not open on the
	// proxy) has no outcome, and that is kept too.
	none := e.unit("w_none", "x.sh", store.StateFailed, nil)
	for range 2 {
		if o, err := e.s.ListedOutcome(ctx, none); err != nil || o != nil {
			t.Errorf("a unit with no result: %+v, %v; want none", o, err)
		}
	}
	// A unit still running has none, and nothing is kept of it.
	if _, err := e.st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w_queued", Account: "acme", KeyID: 1, Now: e.now, Deadline: e.now.Add(time.Hour),
		SealedCommand: e.seal("w_queued", crypto.DirCommand, &automatorv1.Command{Script: "x.sh"})}); err != nil {
		t.Fatal(err)
	}
	queued, err := e.st.WorkGet(ctx, "w_queued")
	if err != nil {
		t.Fatal(err)
	}
	if o, err := e.s.ListedOutcome(ctx, queued); err != nil || o != nil {
		t.Errorf("a queued unit: %+v, %v; want no outcome", o, err)
	}
	if e.s.listed.len() != 3 {
		t.Errorf("%d units kept, want 3", e.s.listed.len())
	}
}

// TestListedOutcomeThatDidNotOpenIsNotKept: a result that does not open is
// an error at every read, never an outcome, and nothing is kept of it; nor
// of a command that does not open.
func TestListedOutcomeThatDidNotOpenIsNotKept(t *testing.T) {
	t.Parallel()
	e := newListedEnv(t)
	ctx := t.Context()
	// Sealed for another unit: it does not open as this one's.
	w := e.unit("w_bad", "x.sh", store.StateSucceeded, e.seal("w_other", crypto.DirResult, &automatorv1.Result{ExitCode: 0}))
	for i := range 2 {
		if o, err := e.s.ListedOutcome(ctx, w); err == nil || o != nil {
			t.Errorf("read %d of a result that does not open: %+v, %v; want an error", i, o, err)
		}
	}
	w.SealedCommand = e.seal("w_other", crypto.DirCommand, &automatorv1.Command{Script: "x.sh"})
	if script, err := e.s.ListedScript(ctx, w); err == nil || script != "" {
		t.Errorf("a command that does not open: %q, %v; want an error", script, err)
	}
	if e.s.listed.len() != 0 {
		t.Errorf("%d units kept of blobs that did not open", e.s.listed.len())
	}
}

// TestListedOutcomeOfADeletedAccountIsDroppedAndNeverShown: when the
// automator sees an account's deletion it drops what it kept of its units;
// and a unit of a deleted account (now its tombstone's) is never answered
// from what was kept for the account, even if kept after the deletion was
// seen (a listing that read the unit just before it).
func TestListedOutcomeOfADeletedAccountIsDroppedAndNeverShown(t *testing.T) {
	t.Parallel()
	e := newListedEnv(t)
	ctx := t.Context()
	w := e.unit("w_ran", "report.sh", store.StateSucceeded, e.seal("w_ran", crypto.DirResult, &automatorv1.Result{ExitCode: 3}))
	if o, err := e.s.ListedOutcome(ctx, w); err != nil || o == nil || o.ExitCode != 3 {
		t.Fatalf("before the deletion: %+v, %v", o, err)
	}
	if _, err := e.s.ListedScript(ctx, w); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.AccountDelete(ctx, store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e.s.checkDeletions(ctx, make(map[string]seenDeletion))
	if e.s.listed.len() != 0 {
		t.Errorf("%d units kept after the deletion was seen, want 0", e.s.listed.len())
	}

	// A listing that opened the unit just before the deletion keeps it
	// after the deletion was seen.
	e.s.listed.put(w.ID, "acme", func(le *listedEntry) {
		le.outcome, le.outcomeKnown, le.script, le.scriptKnown = &Outcome{ExitCode: 3}, true, "report.sh", true
	})
	tomb, err := e.st.WorkGet(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, deleted := store.DeletedAccount(tomb.Account); !deleted {
		t.Fatalf("the unit's account after the deletion: %q", tomb.Account)
	}
	if o, err := e.s.ListedOutcome(ctx, tomb); !errors.Is(err, ErrAccountDeleted) || o != nil {
		t.Errorf("the unit of the deleted account: %+v, %v; want ErrAccountDeleted", o, err)
	}
	if script, err := e.s.ListedScript(ctx, tomb); !errors.Is(err, ErrAccountDeleted) || script != "" {
		t.Errorf("its script: %q, %v; want ErrAccountDeleted", script, err)
	}
	// Listed as acme's before the deletion and read again: the unit is
	// the tombstone's now.
	bare := w
	bare.SealedResult, bare.SealedCommand = nil, nil
	e.s.listed.forgetAccount("acme")
	if o, err := e.s.ListedOutcome(ctx, bare); !errors.Is(err, ErrAccountDeleted) || o != nil {
		t.Errorf("listed before the deletion, read after: %+v, %v; want ErrAccountDeleted", o, err)
	}
}

// TestListedKnownSaysWhetherAListingReadsTheUnitAgain: an ended unit is
// known once its outcome is kept, and for a listing that shows scripts
// once its script name is too; a unit still running has no outcome to
// read, and one of a deleted account nothing to open.
func TestListedKnownSaysWhetherAListingReadsTheUnitAgain(t *testing.T) {
	t.Parallel()
	e := newListedEnv(t)
	ctx := t.Context()
	ran := e.unit("w_ran", "report.sh", store.StateSucceeded, e.seal("w_ran", crypto.DirResult, &automatorv1.Result{ExitCode: 7}))
	if e.s.ListedKnown(ran, false) || e.s.ListedKnown(ran, true) {
		t.Errorf("an ended unit not opened yet is known")
	}
	if _, err := e.s.ListedOutcome(ctx, ran); err != nil {
		t.Fatal(err)
	}
	if !e.s.ListedKnown(ran, false) || e.s.ListedKnown(ran, true) {
		t.Errorf("with its outcome kept: known %v without its script, %v with; want true, false", e.s.ListedKnown(ran, false), e.s.ListedKnown(ran, true))
	}
	if _, err := e.s.ListedScript(ctx, ran); err != nil {
		t.Fatal(err)
	}
	if !e.s.ListedKnown(ran, true) {
		t.Errorf("with its outcome and script kept: not known")
	}

	queued := store.Work{ID: "w_queued", Account: "acme", State: store.StateQueued}
	if !e.s.ListedKnown(queued, false) || e.s.ListedKnown(queued, true) {
		t.Errorf("a queued unit: known %v without its script, %v with; want true, false", e.s.ListedKnown(queued, false), e.s.ListedKnown(queued, true))
	}
	tomb := ran
	tomb.ID, tomb.Account = "w_other", "acme (deleted 2026-01-02T03:04:05Z)"
	if _, deleted := store.DeletedAccount(tomb.Account); !deleted {
		t.Fatalf("%q is not a deleted account's name", tomb.Account)
	}
	if !e.s.ListedKnown(tomb, true) {
		t.Errorf("a unit of a deleted account is not known")
	}
}
