package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
)

// stoppedAt is the stopped_at a poll records: its time when the instance
// said it was stopping, else NULL.
func stoppedAt(p store.InstanceSeenParams) *time.Time {
	if !p.Stopping {
		return nil
	}
	return &p.Now
}

// refusedAt is the refused_at a poll records: its time when it was
// refused (for want of a usable key or for an expired account token),
// else NULL.
func refusedAt(p store.InstanceSeenParams) *time.Time {
	if !p.Refused() {
		return nil
	}
	return &p.Now
}

// refusedTokenExpired is true for an instance whose latest poll was
// refused for an expired account token. A replica predating refused_cause
// leaves it as it was, but writes the key ids of a poll it refuses for
// want of a usable key: those say the cause then.
const refusedTokenExpired = `(COALESCE(i.refused_at >= i.last_poll_at, false) AND i.refused_key_ids = '' AND i.refused_cause = '` + string(store.RefusedTokenExpired) + `')`

// refusedWrongKey is true for an instance whose latest poll was refused
// because it holds a key that is not the account's key of its id
// (store.RefusedWrongKey). Such a poll's key ids are written too: one
// recorded by an automator predating the cause, which writes an empty
// refused_cause for any poll but one refused for its token, ends it.
const refusedWrongKey = `(COALESCE(i.refused_at >= i.last_poll_at, false) AND i.refused_cause = '` + string(store.RefusedWrongKey) + `')`

// instanceRefused is true for an instance whose latest poll was refused
// (for want of a usable key or for an expired account token): one
// recorded since by a replica predating refused_at (which refuses no
// poll's record) moved last_poll_at past it.
const instanceRefused = `COALESCE(i.refused_at >= i.last_poll_at, false)`

// instanceArgs are instanceUpsert's arguments for poll p.
func instanceArgs(p store.InstanceSeenParams) []any {
	return []any{p.Account, p.InstanceID, p.Hostname, p.Version, p.Now, p.Running, stoppedAt(p), p.Run, p.PollSeq, accountCreated(p),
		refusedAt(p), store.KeyIDsText(p.RefusedKeyIDs), store.RefusedCauseText(p)}
}

// instanceStopped is true for an instance whose latest poll said it was
// stopping: one recorded since by a replica predating stopped_at moved
// last_poll_at past it.
const instanceStopped = `COALESCE(i.stopped_at >= i.last_poll_at, false)`

// instanceAccountIs is true while the account polled ($1, created at $10,
// or any of the name when NULL) exists: a poll of an account deleted, or
// deleted and created again under its name, is not recorded.
const instanceAccountIs = `EXISTS (SELECT 1 FROM accounts WHERE name = $1 AND key_id <> 0
	AND ($10::timestamptz IS NULL OR created_at = $10))`

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
// poll_seq, the account's created_at or NULL, refused_at,
// refused_key_ids, refused_cause), unless its account is not the one
// polled (instanceAccountIs) or it is stale (instanceNotStale).
const instanceUpsert = `INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, stopped_at, poll_run, poll_seq, refused_at, refused_key_ids, refused_cause)
SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz, $6::integer, $7::timestamptz, $8::text, $9::bigint, $11::timestamptz, $12::text, $13::text
WHERE ` + instanceAccountIs + `
ON CONFLICT (account, instance_id) DO UPDATE SET` + instanceSet + `
WHERE ` + instanceNotStale

// instanceUpdate records a poll (instanceUpsert's arguments) in its
// instance's record, as instanceUpsert does, where adding where to its
// conditions ("AND ..."), and never makes a record: an instance with none
// was recorded once, but its record was made room for at the account's
// bound since (InstanceSeenParams.MaxPerAccount), perhaps by another
// replica, or deleted (a purge). Written back by a batch, or by a write
// outside the account's lock, neither of which checks the bound, such
// records took an account past it (two re-reviews). A poll it updates no
// record for is looked for again with instanceUnrecorded.
func instanceUpdate(where string) string {
	return `UPDATE instances SET` + instanceSet + `
FROM (SELECT $2::text AS instance_id, $3::text AS hostname, $4::text AS version, $5::timestamptz AS last_poll_at,
	$6::integer AS in_flight, $7::timestamptz AS stopped_at, $8::text AS poll_run, $9::bigint AS poll_seq,
	$11::timestamptz AS refused_at, $12::text AS refused_key_ids, $13::text AS refused_cause) AS excluded
WHERE instances.account = $1 AND instances.instance_id = $2 AND ` + instanceAccountIs + `
	AND ` + instanceNotStale + where
}

// instanceUnrecorded is true when instance $2 of account $1 (created at
// $3, or any of the name when NULL) has no record while the account
// exists: asked, in a statement of its own, of a poll instanceUpdate
// updated nothing for, which is older than its record or has none. Not in
// the update's statement, whose snapshot predates it: a record another
// replica deleted while the update waited for its lock would be seen
// there, and the poll neither written nor made a record of (a re-review).
const instanceUnrecorded = `SELECT NOT EXISTS (SELECT 1 FROM instances WHERE account = $1 AND instance_id = $2)
	AND EXISTS (SELECT 1 FROM accounts WHERE name = $1 AND key_id <> 0 AND ($3::timestamptz IS NULL OR created_at = $3))`

// accountCreated is the created_at of the account poll p names
// (instanceArgs, instanceUnrecorded): NULL for one that names none.
func accountCreated(p store.InstanceSeenParams) *time.Time {
	if p.AccountCreatedAt.IsZero() {
		return nil
	}
	return &p.AccountCreatedAt
}

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
			AND (excluded.stopped_at IS NOT NULL OR NOT COALESCE(instances.stopped_at >= instances.last_poll_at, false))))`

func (s *Store) InstanceSeen(ctx context.Context, p store.InstanceSeenParams) error {
	if p.MaxPerAccount > 0 {
		// A recorded instance's record is updated, never made: another
		// replica may have made room for another's in its place since it
		// was read (a re-review: an upsert here took 3 records to 256).
		var unrecorded bool
		err := s.sent(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
			tag, err := c.Exec(ctx, instanceUpdate(""), instanceArgs(p)...)
			if err != nil || tag.RowsAffected() != 0 {
				return err
			}
			return c.QueryRow(ctx, instanceUnrecorded, p.Account, p.InstanceID, accountCreated(p)).Scan(&unrecorded)
		})
		if err == nil && unrecorded {
			// Counted and written under the account's lock, so that
			// first polls of new instances at once, on any replica, do
			// not pass the bound by their number (a re-review: 5 to 44
			// records at a bound of 3).
			err = s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error { return instanceSeenBounded(ctx, tx, p) })
		}
		if err != nil && !accountGone(err) {
			return fmt.Errorf("recording a poll of instance %q of account %q: %w", p.InstanceID, p.Account, err)
		}
		return nil
	}
	// A poll of an account deleted meanwhile is not recorded.
	_, err := s.sentExec(ctx, instanceUpsert, instanceArgs(p)...)
	if err != nil && !accountGone(err) {
		return fmt.Errorf("recording a poll of instance %q of account %q: %w", p.InstanceID, p.Account, err)
	}
	return nil
}

// accountGone reports whether err is the foreign key of instances refusing
// a record whose account a transaction deleted, and committed, while the
// upsert waited for its row: instanceAccountIs read the account in the
// statement's snapshot, from before that deletion. The poll is then not
// recorded, as one of an account deleted before it (a randomized test
// of the store's contract: the poll was answered Internal).
func accountGone(err error) bool {
	code, constraint := pgCode(err)
	return code == codeForeignKeyViolation && constraint == "instances_account_fkey"
}

// instanceSeenBounded records poll p of an instance not recorded (as
// InstanceSeen) holding its account's row locked (FOR NO KEY UPDATE: the
// foreign keys' checks of units queued meanwhile, FOR KEY SHARE, do not
// wait for it), so that the polls of new instances of one account are
// counted and written one at a time on every replica. Evicted is told of
// a record made room for inside the transaction, which may yet fail or run
// again (inTx): an instance forgotten whose record stays is written at
// its next poll, which is harmless.
func instanceSeenBounded(ctx context.Context, tx pgx.Tx, p store.InstanceSeenParams) error {
	if tag, err := tx.Exec(ctx, `SELECT FROM accounts WHERE name = $1 FOR NO KEY UPDATE`, p.Account); err != nil {
		return err
	} else if tag.RowsAffected() == 0 {
		return nil // deleted meanwhile: not recorded
	}
	var n int
	if err := tx.QueryRow(ctx, instanceCapQuery, p.Account, p.InstanceID, p.MaxPerAccount).Scan(&n); err != nil {
		return err
	}
	var evicted string
	for try := 1; n >= p.MaxPerAccount && evicted == ""; try++ {
		// Each try a statement of its own, with a snapshot of its own.
		err := tx.QueryRow(ctx, instanceEvict, p.Account, p.EvictBefore).Scan(&evicted)
		if !errors.Is(err, pgx.ErrNoRows) {
			if err != nil {
				return err
			}
			continue
		}
		// None deleted: none offline, or the one found was polled as it
		// was deleted (another may be offline).
		var offline bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM instances WHERE account = $1 AND last_poll_at < $2)`, p.Account, p.EvictBefore).Scan(&offline); err != nil {
			return err
		}
		if !offline || try == instanceEvictTries {
			return store.ErrTooManyInstances
		}
	}
	// A poll of an account deleted meanwhile is not recorded.
	if _, err := tx.Exec(ctx, instanceUpsert, instanceArgs(p)...); err != nil {
		return err
	}
	if evicted != "" && p.Evicted != nil {
		// The transaction commits after this, or fails: a failure to
		// commit forgets an instance whose record stays, which is
		// harmless (its next poll is written at once).
		p.Evicted(evicted)
	}
	return nil
}

// instanceEvict deletes a record of account $1 whose last poll is before
// $2 (MaxPerAccount), the first found, and returns its instance id: not
// sorted by the last poll, which under a flood of made-up ids cost every
// new id a sort of the account's records (a re-review). The last poll is
// checked again on the row the DELETE locks: one polled while the DELETE
// waited for its lock is kept, not deleted as the subquery's snapshot,
// from before that poll, found it (a re-review: an instance online,
// answered, then refused). Nothing is deleted then (instanceEvictTries).
// instanceEvictTries bounds the eviction's tries: one finds no record
// offline, or finds one that is polled as it deletes it.
const instanceEvictTries = 3

const instanceEvict = `DELETE FROM instances WHERE account = $1 AND last_poll_at < $2 AND instance_id = (
	SELECT instance_id FROM instances WHERE account = $1 AND last_poll_at < $2 LIMIT 1) RETURNING instance_id`

// instanceCapQuery is -1 when instance $2 of account $1 is recorded, else
// how many instances the account has recorded, counted up to $3: counted
// only for an instance not recorded (CASE), as another replica may have
// recorded it since InstanceSeen looked.
const instanceCapQuery = `SELECT CASE WHEN EXISTS (SELECT 1 FROM instances WHERE account = $1 AND instance_id = $2) THEN -1
	ELSE (SELECT COUNT(*) FROM (SELECT 1 FROM instances WHERE account = $1 LIMIT $3) c) END`

// InstancesSeen writes ps in one transaction, as one batch of updates
// (one round trip). The rows are updated in key order, so replicas
// flushing overlapping batches at once lock them in the same order and
// cannot deadlock. The batch is its own (implicit) transaction, ended by
// the batch's one Sync, not an explicit one whose COMMIT is another round
// trip: a replica that hangs after sending it holds none of the rows'
// locks, which would stall every other replica's polls of those instances.
func (s *Store) InstancesSeen(ctx context.Context, ps []store.InstanceSeenParams) ([]store.InstanceSeenParams, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	sorted := slices.Clone(ps)
	slices.SortStableFunc(sorted, func(a, b store.InstanceSeenParams) int {
		return cmp.Or(cmp.Compare(a.Account, b.Account), cmp.Compare(a.InstanceID, b.InstanceID))
	})
	var unrecorded []store.InstanceSeenParams
	err := s.sent(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		b := &pgx.Batch{}
		for _, p := range sorted {
			// A poll of an account deleted meanwhile is left out.
			b.Queue(instanceUpdate(batchedNotOlder), instanceArgs(p)...)
		}
		br := c.SendBatch(ctx, b)
		var none []store.InstanceSeenParams // updated nothing: older than its record, or without one
		for _, p := range sorted {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return fmt.Errorf("instance %q of account %q: %w", p.InstanceID, p.Account, err)
			}
			if tag.RowsAffected() == 0 {
				none = append(none, p)
			}
		}
		if err := br.Close(); err != nil {
			return err
		}
		// Looked for again after the batch's transaction (instanceUnrecorded).
		for _, p := range none {
			var gone bool
			if err := c.QueryRow(ctx, instanceUnrecorded, p.Account, p.InstanceID, accountCreated(p)).Scan(&gone); err != nil {
				return fmt.Errorf("instance %q of account %q: %w", p.InstanceID, p.Account, err)
			}
			if gone {
				unrecorded = append(unrecorded, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recording the polls of %d instances: %w", len(ps), err)
	}
	return unrecorded, nil
}

// InstanceList counts each instance's claimed units through work_claimed,
// which holds only the claimed units: a few, however many units ended. The
// in_flight column (what the instance said at its last poll) is not read.
// work.instance_id is compared as instances.instance_id is, byte by byte
// (COLLATE "C").
func (s *Store) InstanceList(ctx context.Context, account string) ([]store.Instance, error) {
	rows, err := s.pool.Query(ctx, `SELECT i.account, i.instance_id, i.hostname, i.version, i.last_poll_at, `+instanceStopped+`,
	CASE WHEN `+instanceRefused+` THEN i.refused_key_ids ELSE '' END, `+refusedTokenExpired+`, `+refusedWrongKey+`, COALESCE(c.n, 0)
FROM instances i
LEFT JOIN (SELECT instance_id COLLATE "C" AS instance_id, COUNT(*) AS n FROM work
	WHERE account = $1 AND state = 'claimed' GROUP BY 1) c ON c.instance_id = i.instance_id
WHERE i.account = $1 ORDER BY i.instance_id`, account)
	if err != nil {
		return nil, fmt.Errorf("listing instances of account %q: %w", account, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Instance, error) {
		var in store.Instance
		var refused string
		if err := r.Scan(&in.Account, &in.InstanceID, &in.Hostname, &in.Version, &in.LastPollAt, &in.Stopped, &refused, &in.RefusedTokenExpired, &in.RefusedWrongKey, &in.InFlight); err != nil {
			return in, err
		}
		in.LastPollAt = in.LastPollAt.UTC()
		var err error
		if in.RefusedKeyIDs, err = store.ParseKeyIDsText(refused); err != nil {
			return in, fmt.Errorf("instance %q: %w", in.InstanceID, err)
		}
		return in, nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing instances of account %q: %w", account, err)
	}
	return out, nil
}

func (s *Store) InstancePurge(ctx context.Context, p store.InstancePurgeParams) (int, error) {
	tag, err := s.sentExec(ctx, `DELETE FROM instances WHERE last_poll_at < $1`, p.PolledBefore)
	if err != nil {
		return 0, fmt.Errorf("deleting the instances that have not polled since %s: %w", p.PolledBefore.Format(time.RFC3339), err)
	}
	return int(tag.RowsAffected()), nil
}
