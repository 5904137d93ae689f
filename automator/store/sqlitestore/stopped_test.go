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
