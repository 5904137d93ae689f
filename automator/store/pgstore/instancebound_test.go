package pgstore

import (
	"errors"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// boundedPoll is a poll of instance id of acme at now, at a bound of max,
// evicting records polled last over a minute before now.
func boundedPoll(id string, now time.Time, max int) store.InstanceSeenParams {
	return store.InstanceSeenParams{Account: "acme", InstanceID: id, Hostname: "h", Version: "v", Now: now,
		MaxPerAccount: max, EvictBefore: now.Add(-time.Minute)}
}

// wantInstanceIDs checks the ids of acme's records.
func wantInstanceIDs(t *testing.T, s *Store, want ...string) {
	t.Helper()
	list, err := s.InstanceList(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range list {
		got = append(got, in.InstanceID)
	}
	if len(got) != len(want) {
		t.Fatalf("acme's records: %q; want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("acme's records: %q; want %q", got, want)
		}
	}
}

// TestAnEvictionKeepsARecordPolledWhileItWaitedForIt: a new instance at
// the bound takes the place of a record offline, found by a subquery
// whose snapshot predates a poll of that record committed while the
// eviction waited for its lock: the record, online now, is kept and the
// new instance refused, not the other way round (a re-review: an
// instance answered online, then refused).
func TestAnEvictionKeepsARecordPolledWhileItWaitedForIt(t *testing.T) {
	t.Parallel()
	s := storeWithClaims(t, 0)
	later := testNow.Add(time.Hour)
	if err := s.InstanceSeen(t.Context(), boundedPoll("x", testNow, 1)); err != nil {
		t.Fatal(err)
	}
	poll, pollPID := lockWith(t, s, `UPDATE instances SET last_poll_at = $1 WHERE account = 'acme' AND instance_id = 'x'`, later)
	done := make(chan error, 1)
	go func() { done <- s.InstanceSeen(t.Context(), boundedPoll("y", later, 1)) }()
	waitBlockedBy(t, s, pollPID, "the new instance's eviction")
	if err := poll.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, store.ErrTooManyInstances) {
		t.Fatalf("a new instance at the bound whose only record was polled as it was evicted: %v; want ErrTooManyInstances", err)
	}
	wantInstanceIDs(t, s, "x")
}

// TestAPollOfARecordDeletedWhileItWaitedIsWritten: a poll of a recorded
// instance whose record another replica deletes (makes room for another's
// in its place) while the poll's update waits for its lock updates
// nothing; it is then written as a new instance's, at the bound, one at a
// time or in a batch (returned for InstanceSeen), not answered as written
// (a re-review: the update's snapshot, from before the deletion, showed
// the record there).
func TestAPollOfARecordDeletedWhileItWaitedIsWritten(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		s := storeWithClaims(t, 0)
		if err := s.InstanceSeen(t.Context(), boundedPoll("x", testNow, 3)); err != nil {
			t.Fatal(err)
		}
		del, delPID := lockWith(t, s, `DELETE FROM instances WHERE account = 'acme' AND instance_id = 'x'`)
		p := boundedPoll("x", testNow.Add(time.Second), 3)
		done := make(chan []store.InstanceSeenParams, 1)
		errc := make(chan error, 1)
		go func() {
			if batch {
				unrecorded, err := s.InstancesSeen(t.Context(), []store.InstanceSeenParams{p})
				done <- unrecorded
				errc <- err
				return
			}
			done <- nil
			errc <- s.InstanceSeen(t.Context(), p)
		}()
		waitBlockedBy(t, s, delPID, "the poll's update")
		if err := del.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		unrecorded, err := <-done, <-errc
		if err != nil {
			t.Fatalf("batch %t: %v", batch, err)
		}
		if batch {
			if len(unrecorded) != 1 || unrecorded[0].InstanceID != "x" {
				t.Fatalf("a batch's poll of a record deleted while it waited: returned %+v as not recorded; want it", unrecorded)
			}
			wantInstanceIDs(t, s)
			continue
		}
		wantInstanceIDs(t, s, "x")
	}
}

// TestAPollOfAnAccountDeletedWhileItWaitsIsNotRecorded: a poll whose
// account a transaction deletes, and commits, while the poll's write
// waits for the account's row is not recorded, and is no error
// (InstanceSeen: "a poll of an account that no longer exists (deleted
// meanwhile) is not recorded"), at a bound or without one. Without one,
// the upsert's check of the account, in a snapshot from before the
// deletion, let it through to the foreign key's, which failed: the poll
// was answered Internal (found by storetest.RunRandomized).
func TestAPollOfAnAccountDeletedWhileItWaitsIsNotRecorded(t *testing.T) {
	t.Parallel()
	for _, max := range []int{0, 3} {
		s := storeWithClaims(t, 0)
		del, delPID := lockWith(t, s, `SELECT FROM accounts WHERE name = 'acme' FOR UPDATE`)
		for _, q := range []string{
			`DELETE FROM account_tokens WHERE account = 'acme'`,
			`DELETE FROM account_keys WHERE account = 'acme'`,
			`DELETE FROM accounts WHERE name = 'acme'`,
		} {
			if _, err := del.Exec(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		done := make(chan error, 1)
		go func() { done <- s.InstanceSeen(t.Context(), boundedPoll("x", testNow, max)) }()
		waitBlockedBy(t, s, delPID, "the poll's write")
		if err := del.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Errorf("at a bound of %d: a poll of an account deleted while it waited: %v; want nil, the poll not recorded", max, err)
		}
		var n int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM instances`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("at a bound of %d: %d instance records after a poll of an account deleted while it waited; want none", max, n)
		}
	}
}
