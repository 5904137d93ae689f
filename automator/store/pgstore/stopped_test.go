package pgstore

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestAPollRecordedByAnOlderReplicaEndsAStop: a replica predating
// instances.stopped_at (a rolling upgrade) records a poll without it, and
// leaves the column as it was. That poll, later than the stop, shows the
// instance polling again: it is no longer listed as stopped.
func TestAPollRecordedByAnOlderReplicaEndsAStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, pgtest.DSN(t))
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
	// The upsert of a version 6 replica.
	_, err := s.pool.Exec(ctx, `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight)
SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz, $6::integer WHERE EXISTS (SELECT 1 FROM accounts WHERE name = $1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight`,
		"acme", "a", "a", "v1", testNow.Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	stopped(false)
}

// TestALatePollRecordedByAnOlderReplicaEndsAStop: a replica predating
// instances.poll_run and poll_seq (schema version 7; a rolling upgrade)
// records a poll of the stopping process numbered before its stop, written
// after it, as it always did: it ends the stop (the documented behaviour),
// and leaves the columns as they were, so the newer replicas still order
// the run's polls by the numbers they stored.
func TestALatePollRecordedByAnOlderReplicaEndsAStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, pgtest.DSN(t))
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
	// The upsert of a version 7 replica, of poll 2.
	late := testNow.Add(time.Second)
	_, err := s.pool.Exec(ctx, `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at)
SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz, $6::integer, $7::timestamptz WHERE EXISTS (SELECT 1 FROM accounts WHERE name = $1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at`,
		"acme", "a", "a", "v1", late, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopped(false, late)
	// Poll 1, later still, written by this replica: older than poll 3 of
	// its run, still stored as the run's latest.
	seen(1, false, testNow.Add(2*time.Second))
	stopped(false, late)
}
