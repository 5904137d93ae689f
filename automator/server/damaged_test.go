package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/loglimit"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// damagedDB is a store whose units cannot be queued nor ended, as with
// the pages that hold them damaged, while one unit is always past its
// deadline.
type damagedDB struct {
	store.Store
	expiries atomic.Int64
	many     chan struct{} // closed at the 30th expiry
}

var errDamaged = fmt.Errorf("writing: %w", store.ErrDamaged)

func (d *damagedDB) WorkEnqueue(context.Context, store.WorkEnqueueParams) (store.Work, error) {
	return store.Work{}, errDamaged
}

func (d *damagedDB) WorkNextDeadline(context.Context) (time.Time, bool, error) {
	return time.Now().Add(-time.Hour), true, nil
}

func (d *damagedDB) WorkExpire(context.Context, store.WorkExpireParams) ([]store.Work, error) {
	if d.expiries.Add(1) == 30 {
		close(d.many)
	}
	return nil, errDamaged
}

// TestADamagedDatabaseIsDataLossAndLoggedWithinABound: a call that meets a
// damaged database gets DataLoss saying so (not a bare internal error,
// nor Unavailable, which callers retry at once), and the sweeper's and
// the callers' failures together write at most loglimit.DefaultLines
// lines a minute, each saying what the damage is, none an internal
// error; every one is counted as kind damaged.
func TestADamagedDatabaseIsDataLossAndLoggedWithinABound(t *testing.T) {
	t.Parallel()
	var log syncLog
	m := &storeFailures{}
	d := &damagedDB{many: make(chan struct{})}
	e := newEnv(t, envOptions{log: &log, metrics: m, clock: newFakeClock(), sweepInterval: 5 * time.Millisecond,
		wrap: func(st store.Store) store.Store { d.Store = st; return d }})
	_, err := e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
		Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)})
	const want = "the automator's database is damaged: queueing work failed, and fails until its operator repairs the database"
	if st := status.Convert(err); st.Code() != codes.DataLoss || st.Message() != want {
		t.Errorf("Submit on a damaged database: %v; want DataLoss: %s", err, want)
	}
	waittest.Recv(t, d.many, "30 failed expiries")
	// The sweeper's failures have a bound of their own: they do not take
	// the lines of the callers' and proxies' calls.
	if lines := log.lines(`msg="the database is damaged`, `doing="expiring units past their deadline"`); len(lines) != loglimit.DefaultLines {
		t.Fatalf("%d lines for over 30 failed expiries within a minute, want %d:\n%s", len(lines), loglimit.DefaultLines, log.lines())
	}
	_, err = e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
		Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)})
	if status.Code(err) != codes.DataLoss {
		t.Errorf("Submit on a damaged database: %v; want DataLoss", err)
	}
	if lines := log.lines(`msg="the database is damaged`, `doing="queueing work"`); len(lines) != 2 {
		t.Errorf("%d lines of 2 submits that met the damage after the sweeper's 20, want 2:\n%s", len(lines), log.lines())
	}
	if l := log.lines("internal error"); len(l) != 0 {
		t.Errorf("the damage logged as an internal error:\n%s", l)
	}
	if n := m.count(server.StoreErrorDamaged); n < 30 {
		t.Errorf("%d store errors of kind %s counted, want at least 30", n, server.StoreErrorDamaged)
	}
}

// auditDamaged is a store whose audit log cannot be written, as with its
// pages damaged.
type auditDamaged struct{ store.Store }

func (auditDamaged) AuditAppend(context.Context, store.AuditEvent) (store.AuditEvent, error) {
	return store.AuditEvent{}, errDamaged
}

// TestAuditRecordsThatMeetADamagedDatabaseAreLoggedWithinABound: calls
// with a wrong API key, each refused and recorded in the audit log, whose
// writes fail on a damaged database, write at most loglimit.DefaultLines
// lines a minute of it (they were an error line each: anyone who reaches
// the port could write them), and are counted.
func TestAuditRecordsThatMeetADamagedDatabaseAreLoggedWithinABound(t *testing.T) {
	t.Parallel()
	var log syncLog
	m := &storeFailures{}
	e := newEnv(t, envOptions{log: &log, metrics: m, clock: newFakeClock(), sweepInterval: time.Hour,
		wrap: func(st store.Store) store.Store { return auditDamaged{st} }})
	c := automatorv1.NewAutomatorServiceClient(e.conn("not-a-key"))
	const calls = loglimit.DefaultLines + 5
	for range calls {
		_, err := c.Get(t.Context(), &automatorv1.GetRequest{WorkId: "w_0"})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("a call with a wrong key: %v; want Unauthenticated", err)
		}
	}
	lines := log.lines(`doing="writing the audit log"`)
	if len(lines) != loglimit.DefaultLines {
		t.Errorf("%d lines of %d audit records that met the damage within a minute, want %d:\n%s", len(lines), calls, loglimit.DefaultLines, log.lines())
	}
	if l := log.lines(`msg="writing the audit log"`); len(l) != 0 {
		t.Errorf("audit records that met the damage logged one by one:\n%s", l)
	}
	if n := m.count(server.StoreErrorDamaged); n < calls {
		t.Errorf("%d store errors of kind %s counted for %d failed audit records", n, server.StoreErrorDamaged, calls)
	}
}

// expiryDamaged is a store whose units cannot be timed out, as with the
// pages of the index of units that ended without success damaged.
type expiryDamaged struct{ store.Store }

func (expiryDamaged) WorkExpire(context.Context, store.WorkExpireParams) ([]store.Work, error) {
	return nil, errDamaged
}

// TestACallerWaitingForAUnitThatCannotTimeOutIsToldWhyAtItsDeadline: a
// unit whose timing out meets a damaged database stays open, and its
// waiting caller gets DataLoss at its deadline saying so, rather than
// waiting until the database is repaired with nothing said.
func TestACallerWaitingForAUnitThatCannotTimeOutIsToldWhyAtItsDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{wrap: func(st store.Store) store.Store { return expiryDamaged{st} }})
	ctx, cancel := context.WithTimeout(t.Context(), waittest.Bound)
	defer cancel()
	_, err := e.callerClient().ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: e.account,
		Command: &automatorv1.Command{Script: "hello.sh"}, Timeout: durationpb.New(time.Second)})
	st := status.Convert(err)
	if st.Code() != codes.DataLoss || !strings.Contains(st.Message(), "the automator's database is damaged: timing work") || !strings.Contains(st.Message(), "out at its deadline failed") {
		t.Fatalf("ExecuteOnProxy of a unit that cannot time out: %v; want DataLoss saying why", err)
	}
}
