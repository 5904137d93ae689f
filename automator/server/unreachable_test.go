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
	"github.com/opsgate/opsgate/internal/waittest"
)

// outageStore fails the calls of polls and of the sweeper with the
// database out of reach while down is set, as a PostgreSQL store does
// while the server restarts.
type outageStore struct {
	store.Store
	down      *atomic.Bool
	deletions *atomic.Int32 // AccountDeletions failed
}

func (s outageStore) AccountDeletions(ctx context.Context, since time.Time) ([]store.AccountDeletion, error) {
	if s.down.Load() {
		s.deletions.Add(1)
		return nil, s.fail("listing deleted accounts")
	}
	return s.Store.AccountDeletions(ctx, since)
}

func (s outageStore) fail(doing string) error {
	return fmt.Errorf("%s: %w", doing, store.ErrUnavailable)
}

func (s outageStore) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	if s.down.Load() {
		return nil, s.fail("claiming work")
	}
	return s.Store.WorkClaim(ctx, p)
}

func (s outageStore) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	if s.down.Load() {
		return nil, s.fail("expiring work")
	}
	return s.Store.WorkExpire(ctx, p)
}

func (s outageStore) WorkNextDeadline(ctx context.Context) (time.Time, bool, error) {
	if s.down.Load() {
		return time.Time{}, false, s.fail("reading the next deadline")
	}
	return s.Store.WorkNextDeadline(ctx)
}

// TestAnUnreachableDatabaseIsLoggedOncePerChange: during an outage of the
// database every poll fails UNAVAILABLE and the sweeper fails every sweep
// (its expiry and its look for deleted accounts),
// but the log says so once, with the first failure's details, not once per
// failed call; when the database answers again it says that once, and a
// second outage is logged once more.
func TestAnUnreachableDatabaseIsLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	down, deletions := &atomic.Bool{}, &atomic.Int32{}
	e := newEnv(t, envOptions{log: log, sweepInterval: 5 * time.Millisecond, wrap: func(st store.Store) store.Store { return outageStore{st, down, deletions} }})
	outage := func() {
		down.Store(true)
		for range 5 {
			if _, err := pollNow(e.proxyClient(), "host-a", 1); status.Code(err) != codes.Unavailable {
				t.Fatalf("a poll with the database out of reach: %v; want UNAVAILABLE", err)
			}
		}
		// And the sweeps meanwhile: the look for deleted accounts too.
		from := deletions.Load()
		waittest.Until(t, "3 looks for deleted accounts to fail", func() bool { return deletions.Load() >= from+3 })
		down.Store(false)
	}
	const warning = "level=WARN msg=\"the database is unreachable"
	outage()
	if got := log.lines(warning); len(got) != 1 {
		t.Fatalf("warnings over 5 failed polls and the sweeps meanwhile: %q; want 1", got)
	}
	if got := log.lines(warning, "doing=", "err=", "the database did not answer"); len(got) != 1 {
		t.Errorf("the warning does not keep its failure's details: %q", log.lines(warning))
	}
	waittest.Until(t, "the database to be said to answer again", func() bool { return len(log.lines("level=INFO", "the database answers again")) == 1 })
	outage()
	if got := log.lines(warning); len(got) != 2 {
		t.Errorf("warnings after a second outage: %q; want 2, one per outage", got)
	}
	if got := log.lines(`msg="looking for deleted accounts"`); len(got) != 0 {
		t.Errorf("failed looks for deleted accounts logged on their own: %q; want them in the outage's one warning", got)
	}
	if got := log.lines("level=INFO", "the database answers again"); len(got) > 2 {
		t.Errorf("the database's return is logged more often than it returned: %q", got)
	}
}

// silentStore gets no answer for the sweeper's calls while down is set:
// each returns only when its context ends, as a read on a connection to a
// database cut off without a word does.
type silentStore struct {
	store.Store
	down                *atomic.Bool
	expiries, deletions *atomic.Int32
}

func (s silentStore) silence(ctx context.Context, n *atomic.Int32) error {
	n.Add(1)
	<-ctx.Done()
	return fmt.Errorf("reading from the database: %w", ctx.Err())
}

func (s silentStore) WorkNextDeadline(ctx context.Context) (time.Time, bool, error) {
	if s.down.Load() {
		return time.Time{}, false, s.silence(ctx, s.expiries)
	}
	return s.Store.WorkNextDeadline(ctx)
}

func (s silentStore) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	if s.down.Load() {
		return nil, s.silence(ctx, s.expiries)
	}
	return s.Store.WorkExpire(ctx, p)
}

func (s silentStore) AccountDeletions(ctx context.Context, since time.Time) ([]store.AccountDeletion, error) {
	if s.down.Load() {
		return nil, s.silence(ctx, s.deletions)
	}
	return s.Store.AccountDeletions(ctx, since)
}

// TestASilentDatabaseIsLoggedOncePerOutage: a sweep, or a look for deleted
// accounts, that gets no answer within SweepTimeout is the database out of
// reach: one warning for the outage, as for a refused connection, not an
// error line every SweepInterval for as long as the partition lasts.
func TestASilentDatabaseIsLoggedOncePerOutage(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	down, expiries, deletions := &atomic.Bool{}, &atomic.Int32{}, &atomic.Int32{}
	down.Store(true)
	newEnv(t, envOptions{log: log, sweepInterval: 5 * time.Millisecond, sweepTimeout: 10 * time.Millisecond,
		wrap: func(st store.Store) store.Store { return silentStore{st, down, expiries, deletions} }})
	// A call begins after the one before it was logged.
	waittest.Until(t, "4 sweeps and 4 looks for deleted accounts to get no answer", func() bool {
		return expiries.Load() >= 4 && deletions.Load() >= 4
	})
	if got := log.lines("level=WARN msg=\"the database is unreachable"); len(got) != 1 {
		t.Errorf("warnings over the unanswered sweeps: %q; want 1", got)
	}
	if got := log.lines("level=ERROR"); len(got) != 0 {
		t.Errorf("unanswered sweeps logged as errors: %q; want them in the outage's one warning", got)
	}
	if got := log.lines(`msg="looking for deleted accounts"`); len(got) != 0 {
		t.Errorf("unanswered looks for deleted accounts logged on their own: %q; want them in the outage's one warning", got)
	}
}
