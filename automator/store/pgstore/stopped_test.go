package pgstore

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/automator/store/storetest"
)

// upsertV7 is an instance's poll as a replica of schema version 7 writes
// it, which knows instances.stopped_at but not poll_run and poll_seq.
const upsertV7 = `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at)
SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz, $6::integer, $7::timestamptz WHERE EXISTS (SELECT 1 FROM accounts WHERE name = $1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at`

// TestAPollRecordedByAnOlderReplicaEndsAStop: a replica predating
// instances.stopped_at (schema version 6; a rolling upgrade) records a
// poll without it (storetest.OlderWriterEndsAStop).
func TestAPollRecordedByAnOlderReplicaEndsAStop(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	storetest.OlderWriterEndsAStop(t, s, testNow, func(at time.Time) error {
		_, err := s.pool.Exec(t.Context(), `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight)
SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz, $6::integer WHERE EXISTS (SELECT 1 FROM accounts WHERE name = $1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight`,
			"acme", "a", "a", "v1", at, 0)
		return err
	})
}

// TestALatePollRecordedByAnOlderReplicaEndsAStop: a replica predating
// instances.poll_run and poll_seq (schema version 7; a rolling upgrade)
// records a poll of the stopping process numbered before its stop, written
// after it (storetest.OlderWriterLatePollEndsAStop).
func TestALatePollRecordedByAnOlderReplicaEndsAStop(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	storetest.OlderWriterLatePollEndsAStop(t, s, testNow, func(at time.Time) error {
		_, err := s.pool.Exec(t.Context(), upsertV7,
			"acme", "a", "a", "v1", at, 0, nil)
		return err
	})
}

// TestAStopRecordedByAnOlderReplicaIsNotEndedByALateBatch: a replica
// predating instances.poll_run and poll_seq (schema version 7; a rolling
// upgrade) records the stop (storetest.OlderWriterStopIsNotEndedByALateBatch).
func TestAStopRecordedByAnOlderReplicaIsNotEndedByALateBatch(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	storetest.OlderWriterStopIsNotEndedByALateBatch(t, s, testNow, func(at time.Time) error {
		_, err := s.pool.Exec(t.Context(), upsertV7,
			"acme", "a", "a", "v1", at, 0, at)
		return err
	})
}

// TestAPollRecordedByAnOlderReplicaEndsARefusal: a replica predating
// instances.refused_at (schema version 8; a rolling upgrade) records a
// poll without it (storetest.OlderWriterEndsARefusal).
func TestAPollRecordedByAnOlderReplicaEndsARefusal(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	storetest.OlderWriterEndsARefusal(t, s, testNow, func(at time.Time) error {
		_, err := s.pool.Exec(t.Context(), `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at, poll_run, poll_seq)
SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz, $6::integer, $7::timestamptz, $8::text, $9::bigint WHERE EXISTS (SELECT 1 FROM accounts WHERE name = $1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at,
	poll_run = excluded.poll_run,
	poll_seq = excluded.poll_seq`,
			"acme", "a", "a", "v1", at, 0, nil, "", 0)
		return err
	})
}

// TestAPollRecordedByAnOlderReplicaSaysItsOwnCauseOfRefusal: a replica
// predating instances.refused_cause (schema version 9; a rolling upgrade)
// records a poll refused for want of a usable key, then an accepted one,
// after one refused for an expired token
// (storetest.OlderWriterRefusesForItsOwnCause).
func TestAPollRecordedByAnOlderReplicaSaysItsOwnCauseOfRefusal(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	storetest.OlderWriterRefusesForItsOwnCause(t, s, testNow, func(at time.Time, keyRefused bool) error {
		var refusedAt *time.Time
		keyIDs := ""
		if keyRefused {
			refusedAt, keyIDs = &at, "1"
		}
		_, err := s.pool.Exec(t.Context(), `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at, poll_run, poll_seq, refused_at, refused_key_ids)
SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz, $6::integer, $7::timestamptz, $8::text, $9::bigint, $10::timestamptz, $11::text WHERE EXISTS (SELECT 1 FROM accounts WHERE name = $1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at,
	poll_run = excluded.poll_run,
	poll_seq = excluded.poll_seq,
	refused_at = excluded.refused_at,
	refused_key_ids = excluded.refused_key_ids`,
			"acme", "a", "a", "v1", at, 0, nil, "", 0, refusedAt, keyIDs)
		return err
	})
}
