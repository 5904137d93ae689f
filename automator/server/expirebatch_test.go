package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// expiries records each WorkExpire the server makes: its Max and how many
// units it timed out.
type expiries struct {
	store.Store
	mu    sync.Mutex
	calls []expiry
	total int
}

type expiry struct{ max, n int }

func (e *expiries) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	ws, err := e.Store.WorkExpire(ctx, p)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, expiry{p.Max, len(ws)})
	e.total += len(ws)
	return ws, err
}

func (e *expiries) seen() ([]expiry, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]expiry(nil), e.calls...), e.total
}

// TestABacklogOfDueUnitsIsTimedOutInBatches: units that fall due together
// by the thousand (an automator started again after minutes down, a queue
// filled while its proxies were away) are timed out a batch per write, one
// batch after the other, so the writes of callers and proxies go on
// between them. All of them in one write held SQLite's writer for minutes
// on a hundred thousand units, and grew the automator by gigabytes.
func TestABacklogOfDueUnitsIsTimedOutInBatches(t *testing.T) {
	t.Parallel()
	var rec *expiries
	e := newEnv(t, envOptions{sweepInterval: 20 * time.Millisecond, wrap: func(st store.Store) store.Store {
		rec = &expiries{Store: st}
		return rec
	}})
	const due = 2*server.ExpireBatch + 88
	now := time.Now()
	for i := range due {
		if _, err := e.store.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: fmt.Sprintf("w-%04d", i), Account: e.account, KeyID: 1,
			SealedCommand: []byte("c"), Now: now.Add(-time.Minute), Deadline: now.Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	waittest.Until(t, fmt.Sprintf("the sweeper to time out all %d units due", due), func() bool { _, n := rec.seen(); return n == due })
	calls, _ := rec.seen()
	batches := 0
	for _, c := range calls {
		if c.max != server.ExpireBatch || c.n > c.max {
			t.Fatalf("an expiry of Max %d timed out %d units; want each of Max %d (all of them: %v)", c.max, c.n, server.ExpireBatch, calls)
		}
		if c.n > 0 {
			batches++
		}
	}
	if batches < 3 {
		t.Errorf("%d units timed out in %d writes, want at least 3 of at most %d each: %v", due, batches, server.ExpireBatch, calls)
	}
}

// TestACallAboutAUnitPastItsDeadlineEndsItBehindABacklog: a result, a
// cancel or a caller waiting, for a unit past its deadline that the
// sweeper has not reached, ends that unit then, even behind more units due
// before it than one expiry takes. Each used to time out the batch of the
// earliest due, which did not hold it: the result was refused as if the
// unit were still claimed, the cancel answered it still queued, and the
// waiting caller waited a SweepInterval more.
func TestACallAboutAUnitPastItsDeadlineEndsItBehindABacklog(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	// No sweep comes during the test: its next is an hour away on the
	// real clock, and the backlog, stored behind the server's back, kicks
	// nothing.
	e := newEnv(t, envOptions{clock: clock, sweepInterval: time.Hour})
	api, px := e.callerClient(), e.proxyClient()
	claimed := submit(t, api, e.account, time.Hour)
	cl := claimOne(t, px, "host-a", 1)
	if cl.GetWorkId() != claimed.GetWorkId() {
		t.Fatalf("claimed %s, want %s", cl.GetWorkId(), claimed.GetWorkId())
	}
	cancelled := submit(t, api, e.account, time.Hour)
	waited := submit(t, api, e.account, time.Hour)
	for i := range 4*server.ExpireBatch + 1 { // more than the three calls take in batches
		if _, err := e.store.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: fmt.Sprintf("w-backlog-%04d", i), Account: e.account, KeyID: 1,
			SealedCommand: []byte("c"), Now: clock.Now(), Deadline: clock.Now().Add(30 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Hour)

	err := completeWith(t, px, crypto.Keys{e.key}, cl, "too late")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "is timed_out; result refused") {
		t.Errorf("a result past its unit's deadline, behind a backlog: %v; want FAILED_PRECONDITION, the unit timed out", err)
	}
	st, err := api.Cancel(t.Context(), &automatorv1.CancelRequest{WorkId: cancelled.GetWorkId()})
	if err != nil || st.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Errorf("a cancel past its unit's deadline, behind a backlog: %v, %v; want the unit timed out", st.GetState(), err)
	}
	// The old code answered this wait only at its next look, a
	// SweepInterval (an hour) later: a bound, not a timing.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err = api.Wait(ctx, &automatorv1.WaitRequest{WorkId: waited.GetWorkId()})
	if err != nil || st.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Errorf("a wait past its unit's deadline, behind a backlog: %v, %v; want the unit timed out", st.GetState(), err)
	}
}

// TestAnAutomatorWhoseClockRunsAheadPurgesNoAuditEventItsRetentionKeeps:
// an automator whose clock stepped two days ahead deletes, with a
// retention of a day, only the events older than a day before the newest
// event (SQLite has no clock of its own): not the day of events its
// clock puts in the past (found by a review: it deleted all but its own).
func TestAnAutomatorWhoseClockRunsAheadPurgesNoAuditEventItsRetentionKeeps(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, sweepInterval: time.Hour})
	now := time.Now()
	for _, age := range []time.Duration{30 * time.Hour, time.Hour, time.Minute} {
		if _, err := e.store.AuditAppend(t.Context(), store.AuditEvent{At: now.Add(-age), Kind: store.AuditAuthFailed, Detail: age.String()}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(49 * time.Hour)
	if n, err := e.srv.PurgeAudit(t.Context(), 24*time.Hour); err != nil || n != 1 {
		t.Errorf("PurgeAudit(24h) on a clock 49 h ahead: %d, %v; want the event of 30 h ago alone deleted", n, err)
	}
	// The purge's own event, stamped by that clock, does not stand for
	// now at the next sweep.
	clock.Advance(time.Hour)
	if n, err := e.srv.PurgeAudit(t.Context(), 24*time.Hour); err != nil || n != 0 {
		t.Errorf("the next PurgeAudit(24h), an hour later on that clock: %d, %v; want none deleted", n, err)
	}
	events, err := e.store.AuditList(t.Context(), store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, ev := range events {
		kept = append(kept, ev.Detail)
	}
	if len(kept) != 3 || kept[0] != "1h0m0s" || kept[1] != "1m0s" {
		t.Errorf("the audit log after the purge: %q; want the events of 1 h and 1 min ago, and the purge's", kept)
	}
}
