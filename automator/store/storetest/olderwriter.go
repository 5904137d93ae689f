package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// The stories of an older automator (or replica) writing an instance's
// poll in the database this binary uses, during a rolling upgrade: each
// backend's test passes olderPoll, which writes a poll of account "acme",
// instance "a" (host name "a", version "v1", nothing running) at the time
// given, with that older version's own upsert, which leaves the columns it
// predates as they were.

// OlderWriterEndsAStop: a poll an automator predating instances.stopped_at
// records, later than the stop, shows the instance polling again: it is no
// longer listed as stopped.
func OlderWriterEndsAStop(t *testing.T, s store.Store, now time.Time, olderPoll func(at time.Time) error) {
	t.Helper()
	ctx := t.Context()
	createAcme(t, s, now)
	if err := s.InstanceSeen(ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "a", Hostname: "a", Version: "v2", Stopping: true, Now: now}); err != nil {
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
	if err := olderPoll(now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	stopped(false)
}

// OlderWriterLatePollEndsAStop: a poll of the stopping process numbered
// before its stop, written after it by an automator predating
// instances.poll_run and poll_seq, ends the stop as it always did (the
// documented behaviour of a rolling upgrade), and leaves those columns as
// they were, so this binary still orders the run's polls by the numbers it
// stored.
func OlderWriterLatePollEndsAStop(t *testing.T, s store.Store, now time.Time, olderPoll func(at time.Time) error) {
	t.Helper()
	ctx := t.Context()
	createAcme(t, s, now)
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
	seen(3, true, now)
	stopped(true, now)
	// Poll 2, by the older writer.
	late := now.Add(time.Second)
	if err := olderPoll(late); err != nil {
		t.Fatal(err)
	}
	stopped(false, late)
	// Poll 1, later still, written by this binary: older than poll 3 of
	// its run, still stored as the run's latest.
	seen(1, false, now.Add(2*time.Second))
	stopped(false, late)
}

// OlderWriterStopIsNotEndedByALateBatch: a stop recorded by a replica
// that knows instances.stopped_at but predates poll_run and poll_seq
// (olderStop writes a poll saying the instance stops, at the time given,
// with that older version's upsert), which leaves the run's stored number
// at an earlier poll, is not ended by this binary's batch holding a poll
// of the run numbered after that one but before the stop, earlier on the
// clock (kept in memory while the process polled another replica to say
// it stops).
func OlderWriterStopIsNotEndedByALateBatch(t *testing.T, s store.Store, now time.Time, olderStop func(at time.Time) error) {
	t.Helper()
	ctx := t.Context()
	createAcme(t, s, now)
	poll := func(seq int64, at time.Time) store.InstanceSeenParams {
		return store.InstanceSeenParams{Account: "acme", InstanceID: "a", Hostname: "a", Version: "v2", Run: "r1", PollSeq: seq, Now: at}
	}
	if err := s.InstanceSeen(ctx, poll(1, now)); err != nil {
		t.Fatal(err)
	}
	stop := now.Add(2 * time.Second)
	if err := olderStop(stop); err != nil {
		t.Fatal(err)
	}
	if unrecorded, err := s.InstancesSeen(ctx, []store.InstanceSeenParams{poll(2, now.Add(time.Second))}); err != nil || len(unrecorded) != 0 {
		t.Fatal(unrecorded, err)
	}
	list, err := s.InstanceList(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].Stopped || !list[0].LastPollAt.Equal(stop) {
		t.Fatalf("InstanceList = %+v, want instance a stopped, last poll at %v", list, stop)
	}
}

func createAcme(t *testing.T, s store.Store, now time.Time) {
	t.Helper()
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("hash"), KeyID: 1, SealedKey: []byte("key"), Now: now}); err != nil {
		t.Fatal(err)
	}
}

// OlderWriterEndsARefusal: a poll an automator predating
// instances.refused_at records (it refuses no poll's record, so the poll
// was accepted), later than a refused one, shows the instance polling and
// accepted: it is no longer listed as refused, whether it was refused for
// want of a usable key or for a wrong key (whose cause that automator
// leaves as it was).
func OlderWriterEndsARefusal(t *testing.T, s store.Store, now time.Time, olderPoll func(at time.Time) error) {
	t.Helper()
	ctx := t.Context()
	createAcme(t, s, now)
	refused := func(want bool) {
		t.Helper()
		list, err := s.InstanceList(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Refused() != want {
			t.Fatalf("InstanceList = %+v, want instance a refused %v", list, want)
		}
	}
	for i, p := range []store.InstanceSeenParams{
		{RefusedKeyIDs: []uint32{1}},
		{RefusedKeyIDs: []uint32{1}, WrongKey: true},
	} {
		at := now.Add(time.Duration(2*i) * time.Minute)
		p.Account, p.InstanceID, p.Hostname, p.Version, p.Now = "acme", "a", "a", "v2", at
		if err := s.InstanceSeen(ctx, p); err != nil {
			t.Fatal(err)
		}
		refused(true)
		if err := olderPoll(at.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		refused(false)
	}
}

// OlderWriterRefusesForItsOwnCause: after this binary recorded a poll of
// instance a refused for an expired account token, a poll an automator
// predating instances.refused_cause records (olderPoll: refused for want
// of key id 1 when keyRefused, else accepted), later, leaves the cause
// column as it was; the instance is listed as that poll says all the
// same: refused for want of a usable key, with its key ids, and no longer
// for its token; or not refused.
func OlderWriterRefusesForItsOwnCause(t *testing.T, s store.Store, now time.Time, olderPoll func(at time.Time, keyRefused bool) error) {
	t.Helper()
	ctx := t.Context()
	createAcme(t, s, now)
	if err := s.InstanceSeen(ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "a", Hostname: "a", Version: "v2",
		TokenExpired: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	want := func(keyIDs []uint32, expired bool) {
		t.Helper()
		list, err := s.InstanceList(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || !slices.Equal(list[0].RefusedKeyIDs, keyIDs) || list[0].RefusedTokenExpired != expired {
			t.Fatalf("InstanceList = %+v, want instance a refused for key ids %v, for its expired token %v", list, keyIDs, expired)
		}
	}
	want(nil, true)
	if err := olderPoll(now.Add(time.Minute), true); err != nil {
		t.Fatal(err)
	}
	want([]uint32{1}, false)
	if err := olderPoll(now.Add(2*time.Minute), false); err != nil {
		t.Fatal(err)
	}
	want(nil, false)
}
