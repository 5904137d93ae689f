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
