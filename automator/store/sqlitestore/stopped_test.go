package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store/storetest"
)

// olderPoll writes a poll as an older automator's upsert does (upsert:
// its statement, of the columns it knew, with the arguments args gives for
// the time of the poll).
func olderPoll(t *testing.T, s *Store, upsert string, args func(at int64) []any) func(at time.Time) error {
	return func(at time.Time) error {
		return s.writeTx(t.Context(), func(ctx context.Context, tx querier) error {
			_, err := tx.ExecContext(ctx, upsert, args(toNanos(at))...)
			return err
		})
	}
}

// upsertV11 is an instance's poll as an automator of version 11 writes it,
// which knows instances.stopped_at but not poll_run and poll_seq.
const upsertV11 = `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at)
SELECT ?1, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at`

// TestAPollRecordedByAnOlderAutomatorEndsAStop: an automator predating
// instances.stopped_at (version 10; the database shared while the binary
// is replaced) records a poll without it (storetest.OlderWriterEndsAStop).
func TestAPollRecordedByAnOlderAutomatorEndsAStop(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	storetest.OlderWriterEndsAStop(t, s, testNow, olderPoll(t, s, `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight)
SELECT ?1, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight`,
		func(at int64) []any { return []any{"acme", "a", "a", "v1", at, 0} }))
}

// TestALatePollRecordedByAnOlderAutomatorEndsAStop: an automator predating
// instances.poll_run and poll_seq (version 11) records a poll of the
// stopping process numbered before its stop, written after it
// (storetest.OlderWriterLatePollEndsAStop).
func TestALatePollRecordedByAnOlderAutomatorEndsAStop(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	storetest.OlderWriterLatePollEndsAStop(t, s, testNow, olderPoll(t, s, upsertV11,
		func(at int64) []any { return []any{"acme", "a", "a", "v1", at, 0, 0} }))
}

// TestAStopRecordedByAnOlderAutomatorIsNotEndedByALateBatch: an automator
// predating instances.poll_run and poll_seq (version 11) records the stop
// (storetest.OlderWriterStopIsNotEndedByALateBatch).
func TestAStopRecordedByAnOlderAutomatorIsNotEndedByALateBatch(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	storetest.OlderWriterStopIsNotEndedByALateBatch(t, s, testNow, olderPoll(t, s, upsertV11,
		func(at int64) []any { return []any{"acme", "a", "a", "v1", at, 0, at} }))
}

// TestAPollRecordedByAnOlderAutomatorEndsARefusal: an automator predating
// instances.refused_at (version 12) records a poll without it
// (storetest.OlderWriterEndsARefusal).
func TestAPollRecordedByAnOlderAutomatorEndsARefusal(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	storetest.OlderWriterEndsARefusal(t, s, testNow, olderPoll(t, s, `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at, poll_run, poll_seq)
SELECT ?1, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0)
ON CONFLICT (account, instance_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at,
	poll_run = excluded.poll_run,
	poll_seq = excluded.poll_seq`,
		func(at int64) []any { return []any{"acme", "a", "a", "v1", at, 0, 0, "", 0} }))
}

// TestAPollRecordedByAnOlderAutomatorSaysItsOwnCauseOfRefusal: an
// automator predating instances.refused_cause (version 13) records a poll
// refused for want of a usable key, then an accepted one, after one
// refused for an expired token (storetest.OlderWriterRefusesForItsOwnCause).
func TestAPollRecordedByAnOlderAutomatorSaysItsOwnCauseOfRefusal(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	storetest.OlderWriterRefusesForItsOwnCause(t, s, testNow, func(at time.Time, keyRefused bool) error {
		refusedAt, keyIDs := int64(0), ""
		if keyRefused {
			refusedAt, keyIDs = toNanos(at), "1"
		}
		return olderPoll(t, s, `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at, poll_run, poll_seq, refused_at, refused_key_ids)
SELECT ?1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0)
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
			func(at int64) []any { return []any{"acme", "a", "a", "v1", at, 0, 0, "", 0, refusedAt, keyIDs} })(at)
	})
}
