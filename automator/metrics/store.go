package metrics

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opsgate/opsgate/automator/store"
)

// Store wraps st so that the latency of each call is observed in
// automator_store_call_seconds{method}: every method but Close
// (TestEveryStoreCallIsTimed checks that a method added to store.Store is
// added here).
//
// A call that takes SlowStoreCall or longer is also logged as a warning:
// the store's disk syncing slowly or its database out of reach delays
// every unit's end (a deadline's timeout included), and the histogram
// alone would show that only to whoever looks at it. At most one line per
// slowLogEvery, with the count and the slowest of the calls since the
// line before.
func (m *Metrics) Store(st store.Store) store.Store {
	return &timedStore{Store: st, calls: m.storeCalls, slow: &slowCalls{log: m.log, now: m.o.Now, threshold: SlowStoreCall}}
}

type timedStore struct {
	store.Store
	calls *prometheus.HistogramVec
	slow  *slowCalls
}

// SlowStoreCall is how long a store call takes before it is logged.
const SlowStoreCall = time.Second

// slowLogEvery is the least time between two lines of slow calls.
const slowLogEvery = 10 * time.Second

// slowCalls logs the store calls that took threshold or longer, one line
// per slowLogEvery at most: the first slow call at once, then the count and
// the slowest of those that came within slowLogEvery of the line before,
// with the first call made after that time (slow or not), so a burst of
// slow calls (a stall of the disk) ends with a line that says how bad it
// got.
type slowCalls struct {
	log       *slog.Logger
	now       func() time.Time
	threshold time.Duration

	pending atomic.Bool // more > 0: the fast path's only look

	mu      sync.Mutex
	logged  time.Time     // of the last line
	more    int           // slow calls since it, not logged
	slowest time.Duration // of those
	which   string        // the method of the slowest
}

func (c *slowCalls) note(method string, took time.Duration) {
	slow := took >= c.threshold
	if !slow && !c.pending.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.logged) < slowLogEvery {
		if slow {
			c.more++
			if took > c.slowest {
				c.slowest, c.which = took, method
			}
			c.pending.Store(true)
		}
		return
	}
	var attrs []any
	if slow {
		attrs = append(attrs, "method", method, "took", took.Round(time.Millisecond))
	}
	if c.more > 0 {
		attrs = append(attrs, "more_slow_calls", c.more, "slowest", c.slowest.Round(time.Millisecond), "slowest_method", c.which)
	}
	if len(attrs) == 0 {
		return
	}
	c.log.Warn("store calls were slow: the database's disk or its connection, or another program holding the database locked, holds up the calls that write, units' ends and timeouts among them", attrs...)
	c.logged, c.more, c.slowest, c.which = now, 0, 0, ""
	c.pending.Store(false)
}

// Unwrap returns the store the timing wraps (store.ForgetCredentials finds
// the credential cache through it).
func (s *timedStore) Unwrap() store.Store { return s.Store }

// since observes the time since start under method; use it as
// `defer s.since("Method", time.Now())`.
func (s *timedStore) since(method string, start time.Time) {
	took := time.Since(start)
	s.calls.WithLabelValues(method).Observe(took.Seconds())
	s.slow.note(method, took)
}

func (s *timedStore) AccountCreate(ctx context.Context, p store.AccountCreateParams) (store.Account, error) {
	defer s.since("AccountCreate", time.Now())
	return s.Store.AccountCreate(ctx, p)
}

func (s *timedStore) AccountGet(ctx context.Context, name string) (store.Account, error) {
	defer s.since("AccountGet", time.Now())
	return s.Store.AccountGet(ctx, name)
}

func (s *timedStore) AccountGetByTokenHash(ctx context.Context, h []byte) (store.Account, error) {
	defer s.since("AccountGetByTokenHash", time.Now())
	return s.Store.AccountGetByTokenHash(ctx, h)
}

func (s *timedStore) AccountList(ctx context.Context) ([]store.Account, error) {
	defer s.since("AccountList", time.Now())
	return s.Store.AccountList(ctx)
}

func (s *timedStore) AccountStats(ctx context.Context, p store.AccountStatsParams) ([]store.AccountStats, error) {
	defer s.since("AccountStats", time.Now())
	return s.Store.AccountStats(ctx, p)
}

func (s *timedStore) WorkEnqueue(ctx context.Context, p store.WorkEnqueueParams) (store.Work, error) {
	defer s.since("WorkEnqueue", time.Now())
	return s.Store.WorkEnqueue(ctx, p)
}

func (s *timedStore) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	defer s.since("WorkClaim", time.Now())
	return s.Store.WorkClaim(ctx, p)
}

func (s *timedStore) WorkComplete(ctx context.Context, p store.WorkCompleteParams) (store.Work, error) {
	defer s.since("WorkComplete", time.Now())
	return s.Store.WorkComplete(ctx, p)
}

func (s *timedStore) WorkCancel(ctx context.Context, p store.WorkCancelParams) (store.Work, error) {
	defer s.since("WorkCancel", time.Now())
	return s.Store.WorkCancel(ctx, p)
}

func (s *timedStore) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	defer s.since("WorkExpire", time.Now())
	return s.Store.WorkExpire(ctx, p)
}

func (s *timedStore) WorkPurge(ctx context.Context, p store.WorkPurgeParams) (int, error) {
	defer s.since("WorkPurge", time.Now())
	return s.Store.WorkPurge(ctx, p)
}

func (s *timedStore) WorkGet(ctx context.Context, id string) (store.Work, error) {
	defer s.since("WorkGet", time.Now())
	return s.Store.WorkGet(ctx, id)
}

func (s *timedStore) WorkNextDeadline(ctx context.Context) (time.Time, bool, error) {
	defer s.since("WorkNextDeadline", time.Now())
	return s.Store.WorkNextDeadline(ctx)
}

func (s *timedStore) WorkStates(ctx context.Context, account string, ids []string) (map[string]store.State, error) {
	defer s.since("WorkStates", time.Now())
	return s.Store.WorkStates(ctx, account, ids)
}

func (s *timedStore) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	defer s.since("WorkList", time.Now())
	return s.Store.WorkList(ctx, p)
}

func (s *timedStore) InstanceSeen(ctx context.Context, p store.InstanceSeenParams) error {
	defer s.since("InstanceSeen", time.Now())
	return s.Store.InstanceSeen(ctx, p)
}

func (s *timedStore) InstancesSeen(ctx context.Context, ps []store.InstanceSeenParams) ([]store.InstanceSeenParams, error) {
	defer s.since("InstancesSeen", time.Now())
	return s.Store.InstancesSeen(ctx, ps)
}

func (s *timedStore) InstanceList(ctx context.Context, account string) ([]store.Instance, error) {
	defer s.since("InstanceList", time.Now())
	return s.Store.InstanceList(ctx, account)
}

func (s *timedStore) ReplicaHeartbeat(ctx context.Context, p store.ReplicaHeartbeatParams) error {
	defer s.since("ReplicaHeartbeat", time.Now())
	return s.Store.ReplicaHeartbeat(ctx, p)
}

// DatabaseClock reads the database server's clock, timed like the store's
// calls, when the store beneath has one (pgstore.Store.DatabaseClock);
// otherwise (SQLite, which runs on the automator's own clock) it returns
// errors.ErrUnsupported at once. The server compares it with its own
// (server.DatabaseClock).
func (s *timedStore) DatabaseClock(ctx context.Context) (time.Time, error) {
	type databaseClock interface {
		DatabaseClock(context.Context) (time.Time, error)
	}
	c, ok := s.Store.(databaseClock)
	if !ok {
		c, ok = store.Uncached(s.Store).(databaseClock)
	}
	if !ok {
		return time.Time{}, errors.ErrUnsupported
	}
	defer s.since("DatabaseClock", time.Now())
	return c.DatabaseClock(ctx)
}

func (s *timedStore) InstancePurge(ctx context.Context, p store.InstancePurgeParams) (int, error) {
	defer s.since("InstancePurge", time.Now())
	return s.Store.InstancePurge(ctx, p)
}

func (s *timedStore) ReplicaPurge(ctx context.Context, p store.ReplicaPurgeParams) (int, error) {
	defer s.since("ReplicaPurge", time.Now())
	return s.Store.ReplicaPurge(ctx, p)
}

func (s *timedStore) ReplicaList(ctx context.Context) ([]store.Replica, error) {
	defer s.since("ReplicaList", time.Now())
	return s.Store.ReplicaList(ctx)
}

func (s *timedStore) APIKeyCreate(ctx context.Context, p store.APIKeyCreateParams) (store.APIKey, error) {
	defer s.since("APIKeyCreate", time.Now())
	return s.Store.APIKeyCreate(ctx, p)
}

func (s *timedStore) APIKeyGetByHash(ctx context.Context, h []byte) (store.APIKey, error) {
	defer s.since("APIKeyGetByHash", time.Now())
	return s.Store.APIKeyGetByHash(ctx, h)
}

func (s *timedStore) Ping(ctx context.Context) error {
	defer s.since("Ping", time.Now())
	return s.Store.Ping(ctx)
}

func (s *timedStore) DashboardSessionEnd(ctx context.Context, p store.DashboardSessionEndParams) error {
	defer s.since("DashboardSessionEnd", time.Now())
	return s.Store.DashboardSessionEnd(ctx, p)
}

func (s *timedStore) DashboardSessionEnded(ctx context.Context, id string) (bool, error) {
	defer s.since("DashboardSessionEnded", time.Now())
	return s.Store.DashboardSessionEnded(ctx, id)
}

func (s *timedStore) DashboardSessionPurge(ctx context.Context, p store.DashboardSessionPurgeParams) (int, error) {
	defer s.since("DashboardSessionPurge", time.Now())
	return s.Store.DashboardSessionPurge(ctx, p)
}

func (s *timedStore) AccountGetByToken(ctx context.Context, p store.AccountGetByTokenParams) (store.Account, error) {
	defer s.since("AccountGetByToken", time.Now())
	return s.Store.AccountGetByToken(ctx, p)
}

func (s *timedStore) AccountRotate(ctx context.Context, p store.AccountRotateParams) (store.Account, error) {
	defer s.since("AccountRotate", time.Now())
	return s.Store.AccountRotate(ctx, p)
}

func (s *timedStore) AccountKeys(ctx context.Context, account string) ([]store.AccountKey, error) {
	defer s.since("AccountKeys", time.Now())
	return s.Store.AccountKeys(ctx, account)
}

func (s *timedStore) AccountKeysPurge(ctx context.Context, p store.AccountKeysPurgeParams) (int, error) {
	defer s.since("AccountKeysPurge", time.Now())
	return s.Store.AccountKeysPurge(ctx, p)
}

func (s *timedStore) AccountDelete(ctx context.Context, p store.AccountDeleteParams) (store.AccountDeletion, error) {
	defer s.since("AccountDelete", time.Now())
	return s.Store.AccountDelete(ctx, p)
}

func (s *timedStore) AccountDeletions(ctx context.Context, since time.Time) ([]store.AccountDeletion, error) {
	defer s.since("AccountDeletions", time.Now())
	return s.Store.AccountDeletions(ctx, since)
}

func (s *timedStore) AccountsBeingDeleted(ctx context.Context) ([]store.AccountDeletion, error) {
	defer s.since("AccountsBeingDeleted", time.Now())
	return s.Store.AccountsBeingDeleted(ctx)
}

func (s *timedStore) WorkByIdempotencyKey(ctx context.Context, account, key string, since time.Time) (store.Work, error) {
	defer s.since("WorkByIdempotencyKey", time.Now())
	return s.Store.WorkByIdempotencyKey(ctx, account, key, since)
}

func (s *timedStore) WorkQueuedCount(ctx context.Context, account string, atMost int) (int, error) {
	defer s.since("WorkQueuedCount", time.Now())
	return s.Store.WorkQueuedCount(ctx, account, atMost)
}

func (s *timedStore) WorkClaimedByPolls(ctx context.Context, p store.WorkClaimedByPollsParams) ([]store.Work, error) {
	defer s.since("WorkClaimedByPolls", time.Now())
	return s.Store.WorkClaimedByPolls(ctx, p)
}

func (s *timedStore) WorkEndOpen(ctx context.Context, p store.WorkEndOpenParams) ([]store.Work, error) {
	defer s.since("WorkEndOpen", time.Now())
	return s.Store.WorkEndOpen(ctx, p)
}

func (s *timedStore) APIKeyList(ctx context.Context) ([]store.APIKey, error) {
	defer s.since("APIKeyList", time.Now())
	return s.Store.APIKeyList(ctx)
}

func (s *timedStore) APIKeyRevoke(ctx context.Context, p store.APIKeyRevokeParams) (store.APIKey, error) {
	defer s.since("APIKeyRevoke", time.Now())
	return s.Store.APIKeyRevoke(ctx, p)
}

func (s *timedStore) AuditAppend(ctx context.Context, e store.AuditEvent) (store.AuditEvent, error) {
	defer s.since("AuditAppend", time.Now())
	return s.Store.AuditAppend(ctx, e)
}

func (s *timedStore) AuditPurge(ctx context.Context, p store.AuditPurgeParams) (int, error) {
	defer s.since("AuditPurge", time.Now())
	return s.Store.AuditPurge(ctx, p)
}

func (s *timedStore) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEvent, error) {
	defer s.since("AuditList", time.Now())
	return s.Store.AuditList(ctx, p)
}

func (s *timedStore) DashboardSessionEndList(ctx context.Context, expiresAfter time.Time) ([]store.DashboardSessionEndParams, error) {
	defer s.since("DashboardSessionEndList", time.Now())
	return s.Store.DashboardSessionEndList(ctx, expiresAfter)
}
