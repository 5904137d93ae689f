package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestAPollRecordedByAnOlderAutomatorEndsAStop: an automator predating
// instances.stopped_at (the database shared while the binary is replaced)
// records a poll without it, and leaves the column as it was. That poll,
// later than the stop, shows the instance polling again: it is no longer
// listed as stopped.
func TestAPollRecordedByAnOlderAutomatorEndsAStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("hash"), KeyID: 1, SealedKey: []byte("key"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	if err := s.InstanceSeen(ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "a", Hostname: "a", Version: "v2", Stopping: true, Now: testNow}); err != nil {
		t.Fatal(err)
	}
	stopped := func(want bool) {
		t.Helper()
		list, err := s.InstanceList(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Stopped != want {
			t.Fatalf("InstanceList = %+v, want instance a with Stopped %v", list, want)
		}
	}
	stopped(true)
	// The upsert of version 10's automator.
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight)
SELECT ?1, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight`,
			"acme", "a", "a", "v1", toNanos(testNow.Add(time.Minute)), 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped(false)
}

// TestALatePollRecordedByAnOlderAutomatorEndsAStop: an automator predating
// instances.poll_run and poll_seq (version 11) records a poll of the
// stopping process numbered before its stop, written after it, as it
// always did: it ends the stop (the documented behaviour of a rolling
// upgrade), and leaves the columns as they were, so this binary still
// orders the run's polls by the numbers it stored.
func TestALatePollRecordedByAnOlderAutomatorEndsAStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("hash"), KeyID: 1, SealedKey: []byte("key"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	seen := func(seq int64, stopping bool, at time.Time) {
		t.Helper()
		if err := s.InstanceSeen(ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "a", Hostname: "a", Version: "v2",
			Stopping: stopping, Run: "r1", PollSeq: seq, Now: at}); err != nil {
			t.Fatal(err)
		}
	}
	stopped := func(want bool, at time.Time) {
		t.Helper()
		list, err := s.InstanceList(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Stopped != want || !list[0].LastPollAt.Equal(at) {
			t.Fatalf("InstanceList = %+v, want instance a with Stopped %v, last poll at %v", list, want, at)
		}
	}
	seen(3, true, testNow)
	stopped(true, testNow)
	// The upsert of version 11's automator, of poll 2.
	late := testNow.Add(time.Second)
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at)
SELECT ?1, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at`,
			"acme", "a", "a", "v1", toNanos(late), 0, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped(false, late)
	// Poll 1, later still, written by this binary: older than poll 3 of
	// its run, still stored as the run's latest.
	seen(1, false, testNow.Add(2*time.Second))
	stopped(false, late)
}
