package server_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// finishedTotals reads automator_work_finished_total from m, by account
// and state ("acme/cancelled").
func finishedTotals(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	out := make(map[string]float64)
	for _, f := range gather(t, m) {
		if f.GetName() != "automator_work_finished_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			out[label(s, "account")+"/"+label(s, "state")] = s.GetCounter().GetValue()
		}
	}
	return out
}

// waitsOpen is automator_waits_open of account: the Wait calls that have
// found their unit not ended and wait for its end.
func waitsOpen(t *testing.T, m *metrics.Metrics, account string) float64 {
	t.Helper()
	for _, f := range gather(t, m) {
		if f.GetName() != "automator_waits_open" {
			continue
		}
		for _, s := range f.GetMetric() {
			if label(s, "account") == account {
				return s.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// gather is every metric family m serves.
func gather(t *testing.T, m *metrics.Metrics) []*dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// deletedBeforeStart is a newEnv wrap that deletes account initech, with
// a queued unit, before the automator starts.
func deletedBeforeStart(t *testing.T) func(store.Store) store.Store {
	return func(st store.Store) store.Store {
		ctx := context.Background()
		now := time.Now()
		if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "initech", TokenHash: []byte("t"), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "old", Account: "initech", KeyID: 1, SealedCommand: []byte("c"), Now: now, Deadline: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AccountDelete(ctx, store.AccountDeleteParams{Name: "initech", Reason: "account initech was deleted", Now: now}); err != nil {
			t.Fatal(err)
		}
		return cachedCredentials(st)
	}
}

// TestUnitsCancelledByAccountDeletionCountAsFinished: the queued and
// claimed units that `automator account delete` cancels (in another
// process) count in automator_work_finished_total as cancelled, once each,
// under the account's name, not under its tombstone (a new series per
// deletion); a unit its caller cancelled before is not counted again; and
// a deletion made before the automator started is not counted by it (the
// automator running then counted it).
func TestUnitsCancelledByAccountDeletionCountAsFinished(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	e := newEnv(t, envOptions{pollWindow: time.Hour, wrap: deletedBeforeStart(t), sweepInterval: 20 * time.Millisecond, metrics: m})
	px, caller := e.proxyClient(), e.callerClient()
	byCaller := submit(t, caller, e.account, time.Hour)
	if _, err := caller.Cancel(context.Background(), &automatorv1.CancelRequest{WorkId: byCaller.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	claimed := submit(t, caller, e.account, time.Hour)
	claimOne(t, px, "host-a")
	queued := submit(t, caller, e.account, time.Hour)
	waitClaimed, waitQueued := waitAsync(caller, claimed.GetWorkId()), waitAsync(caller, queued.GetWorkId())
	// Both callers wait before the deletion: a Wait that arrived after it
	// would read its unit cancelled and return before the automator had
	// acted on the deletion (and counted), which a loaded machine did once.
	waittest.Until(t, "both callers to wait for their units", func() bool { return waitsOpen(t, m, "acme") == 2 })
	if got := finishedTotals(t, m); got["acme/cancelled"] != 1 {
		t.Fatalf("finished units before the deletion: %v; want acme/cancelled 1 (the caller's cancel)", got)
	}

	e.deleteAccount(e.account)
	// Its waiting callers are woken once the automator has acted on the
	// deletion.
	for _, w := range []<-chan waitResult{waitClaimed, waitQueued} {
		if got := waittest.Recv(t, w, "a caller waiting for a unit of the deleted account to be answered"); got.st.GetState() != automatorv1.State_STATE_CANCELLED {
			t.Fatalf("a caller waiting for a unit of the deleted account: %v, %v; want cancelled", got.st, got.err)
		}
	}

	// Each unit is counted before its callers are woken.
	got := finishedTotals(t, m)
	if got["acme/cancelled"] != 3 {
		t.Errorf("automator_work_finished_total{account=\"acme\",state=\"cancelled\"} = %v after the deletion cancelled a claimed and a queued unit; want 3 (1 cancelled by its caller before)", got["acme/cancelled"])
	}
	for k, v := range got {
		if strings.Contains(k, "deleted") || strings.HasPrefix(k, "initech/") {
			t.Errorf("automator_work_finished_total has %s = %v; want no series for a tombstone, nor for the deletion made before the automator started", k, v)
		}
	}
}

// TestAccountDeletionIsLoggedWithTheUnitsItCancelled: the automator logs a
// deletion it notices once, at info, with the number of units the
// deletion cancelled (not those its callers had cancelled before); one
// made before it started, which it only looks at again, is no news.
func TestAccountDeletionIsLoggedWithTheUnitsItCancelled(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	e := newEnv(t, envOptions{pollWindow: time.Hour, wrap: deletedBeforeStart(t), sweepInterval: 20 * time.Millisecond, log: log})
	caller := e.callerClient()
	byCaller := submit(t, caller, e.account, time.Hour)
	if _, err := caller.Cancel(context.Background(), &automatorv1.CancelRequest{WorkId: byCaller.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	queued := submit(t, caller, e.account, time.Hour)
	waitQueued := waitAsync(caller, queued.GetWorkId())

	e.deleteAccount(e.account)
	waittest.Recv(t, waitQueued, "a caller waiting for a unit of the deleted account to be answered")
	// Logged once the callers are woken.
	waittest.Until(t, "the automator to log acme's deletion", func() bool { return len(log.lines("account deleted", "account=acme ")) > 0 })

	if got := log.lines("level=INFO", "account deleted", "account=acme "); len(got) != 1 || !strings.Contains(got[0], "units_cancelled=1") {
		t.Errorf("info lines of acme's deletion: %q; want one, with units_cancelled=1", got)
	}
	if got := log.lines("level=INFO", "account deleted", "account=initech "); len(got) != 0 {
		t.Errorf("info lines of initech's deletion, made before the automator started: %q; want none", got)
	}
}

// hasSeries reports whether m serves a series labelled with account.
func hasSeries(t *testing.T, m *metrics.Metrics, account string) bool {
	t.Helper()
	for _, f := range gather(t, m) {
		for _, s := range f.GetMetric() {
			if label(s, "account") == account {
				return true
			}
		}
	}
	return false
}

// TestDeletedAccountIsForgottenAfterTheLookBack: what the automator keeps
// in memory per account (its series in /metrics, the hub's counts, the
// records of its instances and their runs, its queue count) goes once the
// account's deletion is older than the look back for deletions, so an
// automator whose accounts come and go does not grow with every account it
// ever served; an account deleted and created again under the same name
// keeps its.
func TestDeletedAccountIsForgottenAfterTheLookBack(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	m := metrics.New(metrics.Options{})
	e := newEnv(t, envOptions{pollWindow: time.Hour, clock: clock, sweepInterval: 20 * time.Millisecond, metrics: m})
	caller := e.callerClient()
	initech, _ := e.addAccount("initech")
	// A unit of each account queued, and claimed by a proxy run.
	for account, px := range map[string]automatorv1.ProxyServiceClient{
		e.account: e.proxyClient(),
		"initech": automatorv1.NewProxyServiceClient(e.conn(initech)),
	} {
		submit(t, caller, account, time.Hour)
		resp, err := px.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "host-a", MaxUnits: 1, RunId: "run-1", PollSeq: 1})
		if err != nil || len(resp.GetClaims()) != 1 {
			t.Fatalf("poll of %s: %v, %d claims; want one", account, err, len(resp.GetClaims()))
		}
	}
	// A caller waits for the queued one, until the deletion ends it.
	queued := submit(t, caller, e.account, time.Hour)
	waited := make(chan error, 1)
	go func() {
		_, err := caller.Wait(context.Background(), &automatorv1.WaitRequest{WorkId: queued.GetWorkId()})
		waited <- err
	}()
	gaugeOf := func(name, account string) (float64, bool) {
		for _, f := range gather(t, m) {
			for _, s := range f.GetMetric() {
				if f.GetName() == name && label(s, "account") == account {
					return s.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	waittest.Until(t, "the caller's wait for acme's unit to be open", func() bool { n, _ := gaugeOf("automator_waits_open", e.account); return n == 1 })
	if _, ok := gaugeOf("automator_polls_open", e.account); !ok {
		t.Fatal("no automator_polls_open series for acme: the test needs one")
	}

	e.deleteAccount(e.account)
	e.deleteAccount("initech")
	e.addAccount("initech")
	waittest.Until(t, "the automator to count the units acme's deletion cancelled", func() bool {
		return finishedTotals(t, m)["acme/cancelled"] == 2
	})
	waittest.Recv(t, waited, "the wait for acme's unit to end with the deletion")
	if n := e.srv.AccountEntries(e.account); n == 0 || !hasSeries(t, m, e.account) {
		t.Fatalf("before the look back: %d entries and series %v kept for acme; the test needs some", n, hasSeries(t, m, e.account))
	}
	// Its polls and waits open here, woken by the deletion, are not shown
	// at 0 until then, where an alert on an account no proxy polls saw
	// them (a review).
	waittest.Until(t, "acme's automator_polls_open and automator_waits_open to go with its deletion", func() bool {
		_, polls := gaugeOf("automator_polls_open", e.account)
		_, waits := gaugeOf("automator_waits_open", e.account)
		return !polls && !waits
	})
	initechEntries := e.srv.AccountEntries("initech")

	clock.Advance(server.ForgetDeletedAfter + time.Minute)
	waittest.Until(t, "the automator to drop acme's series and entries, deleted past the look back", func() bool {
		return !hasSeries(t, m, e.account) && e.srv.AccountEntries(e.account) == 0
	})
	if n := e.srv.AccountEntries("initech"); n != initechEntries {
		t.Errorf("initech, deleted and created again: %d entries kept, %d before; want them kept", n, initechEntries)
	}
}

// accountGetFails fails every AccountGet of one name while it is set,
// as a database out of reach does, and counts those it failed.
type accountGetFails struct {
	store.Store
	name   string
	mu     sync.Mutex
	on     bool
	failed int
}

func (s *accountGetFails) AccountGet(ctx context.Context, name string) (store.Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on && name == s.name {
		s.failed++
		return store.Account{}, errors.New("the database is out of reach")
	}
	return s.Store.AccountGet(ctx, name)
}

func (s *accountGetFails) set(on bool) (failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = on
	return s.failed
}

// TestADeletedAccountIsForgottenOnceTheStoreAnswersAgain: when the store
// does not answer the look at the name (is it an account again?) that
// forgetting a deleted account begins with, the next check tries again.
// The first try used to be the only one: the deleted account's series and
// entries stayed until the automator restarted (found by a helper).
func TestADeletedAccountIsForgottenOnceTheStoreAnswersAgain(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	m := metrics.New(metrics.Options{})
	var st *accountGetFails
	e := newEnv(t, envOptions{pollWindow: time.Hour, clock: clock, sweepInterval: 20 * time.Millisecond, metrics: m,
		wrap: func(s store.Store) store.Store { st = &accountGetFails{Store: s, name: "acme"}; return st }})
	submit(t, e.callerClient(), e.account, time.Hour)
	e.deleteAccount(e.account)
	waittest.Until(t, "the automator to count the unit acme's deletion cancelled", func() bool {
		return finishedTotals(t, m)["acme/cancelled"] == 1
	})
	if !hasSeries(t, m, e.account) {
		t.Fatal("no series of acme before its forgetting: the test needs some")
	}
	st.set(true)
	clock.Advance(server.ForgetDeletedAfter + time.Minute)
	waittest.Until(t, "the automator to look at acme's name, and the store not to answer", func() bool { return st.set(true) > 0 })
	st.set(false)
	waittest.Until(t, "the automator to drop acme's series once the store answers again", func() bool {
		return !hasSeries(t, m, e.account) && e.srv.AccountEntries(e.account) == 0
	})
}

// deletionsHeld holds the automator's looks for deletions until release
// is closed.
type deletionsHeld struct {
	store.Store
	release chan struct{}
}

func (s *deletionsHeld) AccountDeletions(ctx context.Context, since time.Time) ([]store.AccountDeletion, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.AccountDeletions(ctx, since)
}

// TestTheOpenPollsOfAnAccountCreatedAgainAreKeptWhenItsDeletionIsSeen: a
// deletion seen after its name was made an account again leaves the new
// account's gauge of open polls alone; dropping it, as a deleted
// account's is, showed a poll of the new account open as none.
func TestTheOpenPollsOfAnAccountCreatedAgainAreKeptWhenItsDeletionIsSeen(t *testing.T) {
	t.Parallel()
	var log syncLog
	m := metrics.New(metrics.Options{})
	held := &deletionsHeld{release: make(chan struct{})}
	e := newEnv(t, envOptions{pollWindow: time.Hour, sweepInterval: 20 * time.Millisecond, metrics: m, log: &log,
		wrap: func(s store.Store) store.Store { held.Store = s; return held }})
	e.deleteAccount(e.account)
	token, _ := e.addAccount(e.account)
	go automatorv1.NewProxyServiceClient(e.conn(token)).Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "host-a", MaxUnits: 1, RunId: "run-1", PollSeq: 1})
	polls := func() float64 {
		for _, f := range gather(t, m) {
			for _, s := range f.GetMetric() {
				if f.GetName() == "automator_polls_open" && label(s, "account") == e.account {
					return s.GetGauge().GetValue()
				}
			}
		}
		return 0
	}
	waittest.Until(t, "a poll of acme, made again, to be open", func() bool { return polls() == 1 })
	close(held.release)
	log.awaitLines(t, "the automator to see acme's deletion", "account deleted")
	if n := polls(); n != 1 {
		t.Errorf("automator_polls_open{account=%q} = %v once the deletion was seen, with a poll of the account made again open; want 1", e.account, n)
	}
}

// TestADeletedAccountsGaugesMadeAgainAreDroppedAgain: a poll of a deleted
// account that slipped past the deletion's wake-up (it began before the
// credential cache forgot the account), or a scrape that listed the
// account before the deletion, makes its open polls' gauge again after it
// was dropped; it is dropped again once such a poll has ended, two poll
// windows after the deletion was seen, not left at 0 until the rest of the
// account's series go (a re-review).
func TestADeletedAccountsGaugesMadeAgainAreDroppedAgain(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	m := metrics.New(metrics.Options{})
	var log syncLog
	e := newEnv(t, envOptions{pollWindow: time.Second, clock: clock, sweepInterval: 20 * time.Millisecond, metrics: m, log: &log})
	submit(t, e.callerClient(), e.account, time.Hour)
	e.deleteAccount(e.account)
	log.awaitLines(t, "the automator to see acme's deletion", "account deleted")
	gauge := func() bool {
		for _, f := range gather(t, m) {
			for _, s := range f.GetMetric() {
				if f.GetName() == "automator_polls_open" && label(s, "account") == e.account {
					return true
				}
			}
		}
		return false
	}
	waittest.Until(t, "acme's automator_polls_open to go with its deletion", func() bool { return !gauge() })
	m.PollOpened(e.account)() // a poll that slipped past the wake-up, and ended
	if !gauge() {
		t.Fatal("no automator_polls_open series for acme after a poll of it: the test needs one")
	}
	clock.Advance(3 * time.Second)
	waittest.Until(t, "acme's automator_polls_open, made again, to go again", func() bool { return !gauge() })
	if !hasSeries(t, m, e.account) {
		t.Error("acme's counters went with its gauges, before forgetDeletedAfter")
	}
}
