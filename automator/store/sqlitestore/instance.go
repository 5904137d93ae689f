package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// stoppedAt is the stopped_at a poll records: its time when the instance
// said it was stopping, else 0.
func stoppedAt(p store.InstanceSeenParams) int64 {
	if !p.Stopping {
		return 0
	}
	return toNanos(p.Now)
}

// instanceStopped is true for an instance whose latest poll said it was
// stopping: one recorded since by an automator predating stopped_at moved
// last_poll_at past it.
const instanceStopped = `(i.stopped_at >= i.last_poll_at)`

// refusedAt is the refused_at a poll records: its time when it was
// refused (for want of a usable key or for an expired account token),
// else 0.
func refusedAt(p store.InstanceSeenParams) int64 {
	if !p.Refused() {
		return 0
	}
	return toNanos(p.Now)
}

// refusedTokenExpired is true for an instance whose latest poll was
// refused for an expired account token. An automator predating
// refused_cause leaves it as it was, but writes the key ids of a poll it
// refuses for want of a usable key: those say the cause then.
const refusedTokenExpired = `((i.refused_at >= i.last_poll_at) AND i.refused_key_ids = '' AND i.refused_cause = '` + string(store.RefusedTokenExpired) + `')`

// refusedWrongKey is true for an instance whose latest poll was refused
// because it holds a key that is not the account's key of its id
// (store.RefusedWrongKey). Such a poll's key ids are written too: one
// recorded by an automator predating the cause, which writes an empty
// refused_cause for any poll but one refused for its token, ends it.
const refusedWrongKey = `((i.refused_at >= i.last_poll_at) AND i.refused_cause = '` + string(store.RefusedWrongKey) + `')`

// instanceRefused is true for an instance whose latest poll was refused
// (for want of a usable key or for an expired account token): one
// recorded since by an automator predating refused_at (which refuses no
// poll's record) moved last_poll_at past it.
const instanceRefused = `(i.refused_at >= i.last_poll_at)`

// instanceArgs are instanceUpsert's arguments for poll p.
func instanceArgs(p store.InstanceSeenParams) []any {
	return []any{p.Account, p.InstanceID, p.Hostname, p.Version, toNanos(p.Now), p.Running, stoppedAt(p), p.Run, p.PollSeq,
		toNanos(p.AccountCreatedAt), refusedAt(p), store.KeyIDsText(p.RefusedKeyIDs), store.RefusedCauseText(p)}
}

// instanceAccountIs is true while the account polled (?1, created at ?10,
// or any of the name when 0) exists: a poll of an account deleted, or
// deleted and created again under its name, is not recorded.
const instanceAccountIs = `EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0 AND (?10 = 0 OR created_at = ?10))`

// instanceSet is what a poll (excluded) sets of its instance's record.
const instanceSet = `
	hostname = excluded.hostname,
	version = excluded.version,
	last_poll_at = excluded.last_poll_at,
	in_flight = excluded.in_flight,
	stopped_at = excluded.stopped_at,
	poll_run = excluded.poll_run,
	poll_seq = excluded.poll_seq,
	refused_at = excluded.refused_at,
	refused_key_ids = excluded.refused_key_ids,
	refused_cause = excluded.refused_cause`

// instanceNotStale is false for a poll (excluded) of the run of the
// stored poll and numbered before it: polls of one run are ordered by
// their numbers, not by when they are written.
const instanceNotStale = `NOT (excluded.poll_run <> '' AND excluded.poll_run = instances.poll_run
	AND excluded.poll_seq <> 0 AND excluded.poll_seq < instances.poll_seq)`

// instanceUpsert records a poll (the arguments: account, instance id,
// hostname, version, last_poll_at, in_flight, stopped_at, poll_run,
// poll_seq, the account's created_at or 0, refused_at, refused_key_ids,
// refused_cause), unless its account is not the one polled
// (instanceAccountIs) or it is stale (instanceNotStale).
const instanceUpsert = `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at, poll_run, poll_seq, refused_at, refused_key_ids, refused_cause)
SELECT ?1, ?, ?, ?, ?, ?, ?, ?, ?, ?11, ?12, ?13 WHERE ` + instanceAccountIs + `
ON CONFLICT (account, instance_id) DO UPDATE SET` + instanceSet + `
WHERE ` + instanceNotStale

// instanceBatchUpdate records a poll of a batch (instanceUpsert's
// arguments) in its instance's record, as instanceUpsert does when newer
// (batchedNotOlder), and never makes a record: an instance with none was
// recorded once, but its record was made room for at the account's bound
// since (InstanceSeenParams.MaxPerAccount), perhaps by another replica, or
// deleted (a purge of records 30 days silent). Written back by a batch,
// which checks no bound, such records took an account past it (a
// re-review).
const instanceBatchUpdate = `UPDATE instances SET` + instanceSet + `
FROM (SELECT ?2 AS instance_id, ?3 AS hostname, ?4 AS version, ?5 AS last_poll_at, ?6 AS in_flight, ?7 AS stopped_at,
	?8 AS poll_run, ?9 AS poll_seq, ?11 AS refused_at, ?12 AS refused_key_ids, ?13 AS refused_cause) AS excluded
WHERE instances.account = ?1 AND instances.instance_id = ?2 AND ` + instanceAccountIs + `
	AND ` + instanceNotStale + batchedNotOlder

// instanceUnrecorded is true when instance ?2 of account ?1 (created at
// ?3, or any of the name when 0) has no record while the account exists.
const instanceUnrecorded = `SELECT NOT EXISTS (SELECT 1 FROM instances WHERE account = ?1 AND instance_id = ?2)
	AND EXISTS (SELECT 1 FROM accounts WHERE name = ?1 AND key_id <> 0 AND (?3 = 0 OR created_at = ?3))`

// batchedNotOlder is what a batch adds to instanceUpsert's conditions: a poll kept in
// memory while a later one was written (one at a time, or by another
// replica) changes nothing. A poll of the stored poll's run is later when
// numbered after it, whatever the clock says: after a step back of the
// automator's clock, the record follows the clock rather than keep a time
// ahead of it, which would list an instance that died meanwhile online
// for as long as the step. Not so for one that would end a stop: a
// process never polls without saying it stops after a poll that said so,
// so the stop was recorded by a replica predating poll_seq, which left
// the run's stored number at an earlier poll. Another poll is later when
// it is not earlier on the clock.
const batchedNotOlder = `
	AND (excluded.last_poll_at >= instances.last_poll_at
		OR (excluded.poll_run <> '' AND excluded.poll_run = instances.poll_run
			AND instances.poll_seq <> 0 AND excluded.poll_seq > instances.poll_seq
			AND (excluded.stopped_at <> 0 OR NOT (instances.stopped_at >= instances.last_poll_at))))`

func (s *Store) InstanceSeen(ctx context.Context, p store.InstanceSeenParams) error {
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		if p.MaxPerAccount > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, instanceCapQuery, p.Account, p.InstanceID, p.MaxPerAccount).Scan(&n); err != nil {
				return err
			}
			if n >= p.MaxPerAccount {
				var evicted string
				err := tx.QueryRowContext(ctx, instanceEvict, p.Account, toNanos(p.EvictBefore)).Scan(&evicted)
				if errors.Is(err, sql.ErrNoRows) {
					return store.ErrTooManyInstances
				}
				if err != nil {
					return err
				}
				if p.Evicted != nil {
					p.Evicted(evicted)
				}
			}
		}
		// A poll of an account deleted meanwhile is not recorded.
		_, err := tx.ExecContext(ctx, instanceUpsert, instanceArgs(p)...)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording a poll of instance %q of account %q: %w", p.InstanceID, p.Account, err)
	}
	return nil
}

// instanceEvict deletes a record of account ?1 whose last poll is before
// ?2 (MaxPerAccount), the first found in the account's index, and returns
// its instance id: not sorted by the last poll, which under a flood of
// made-up ids took the write lock for up to a second (a re-review).
const instanceEvict = `DELETE FROM instances WHERE account = ?1 AND instance_id = (
	SELECT instance_id FROM instances WHERE account = ?1 AND last_poll_at < ?2 LIMIT 1) RETURNING instance_id`

// instanceCapQuery is -1 when instance ?2 of account ?1 is recorded, else
// how many instances the account has recorded, counted up to ?3: counted
// only for an instance not recorded (CASE), so the polls of an automator
// restarted under thousands of proxies do not count them each.
const instanceCapQuery = `SELECT CASE WHEN EXISTS (SELECT 1 FROM instances WHERE account = ?1 AND instance_id = ?2) THEN -1
	ELSE (SELECT COUNT(*) FROM (SELECT 1 FROM instances WHERE account = ?1 LIMIT ?3)) END`

// instanceListQuery lists an account's instances (?1) with the number of
// its units each has claimed, counted through work_claimed, which holds only
// the claimed units: a few, however many units ended. The in_flight column
// (what the instance said at its last poll) is not read.
const instanceListQuery = `SELECT i.account, i.instance_id, i.hostname, i.version, i.last_poll_at, ` + instanceStopped + `,
	CASE WHEN ` + instanceRefused + ` THEN i.refused_key_ids ELSE '' END, ` + refusedTokenExpired + `, ` + refusedWrongKey + `, COALESCE(c.n, 0)
FROM instances i
LEFT JOIN (SELECT instance_id, COUNT(*) AS n FROM work
	WHERE account = ?1 AND state = 'claimed' GROUP BY instance_id) c ON c.instance_id = i.instance_id
WHERE i.account = ?1 ORDER BY i.instance_id`

func (s *Store) InstanceList(ctx context.Context, account string) ([]store.Instance, error) {
	rows, err := s.reads.QueryContext(ctx, instanceListQuery, account)
	if err != nil {
		return nil, fmt.Errorf("listing instances of account %q: %w", account, err)
	}
	defer rows.Close()
	var out []store.Instance
	for rows.Next() {
		var in store.Instance
		var lastPollAt int64
		var refused string
		if err := rows.Scan(&in.Account, &in.InstanceID, &in.Hostname, &in.Version, &lastPollAt, &in.Stopped, &refused, &in.RefusedTokenExpired, &in.RefusedWrongKey, &in.InFlight); err != nil {
			return nil, fmt.Errorf("listing instances of account %q: %w", account, err)
		}
		in.LastPollAt = fromNanos(lastPollAt)
		var err error
		if in.RefusedKeyIDs, err = store.ParseKeyIDsText(refused); err != nil {
			return nil, fmt.Errorf("listing instances of account %q: instance %q: %w", account, in.InstanceID, err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing instances of account %q: %w", account, err)
	}
	return out, nil
}

func (s *Store) InstancePurge(ctx context.Context, p store.InstancePurgeParams) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM instances WHERE last_poll_at < ?`, toNanos(p.PolledBefore))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deleting the instances that have not polled since %s: %w", p.PolledBefore.Format(time.RFC3339), err)
	}
	return int(n), nil
}
