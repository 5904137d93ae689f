package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// workColumns are a unit's columns in scanWork's order, for the statements
// on open units (a deleted account has none, shownAccount).
const workColumns = `id, account, ` + workColumnsAfterAccount

const workColumnsAfterAccount = `state, key_id, sealed_command, queued_at, deadline,
	claimed_at, instance_id, claim_id, finished_at, sealed_result, reason,
	COALESCE(idempotency_key, '')`

// workColumnsWithoutSealed is workColumns with NULL for the sealed command
// and result: for the statements that time units out (expire.go), whose
// callers read neither, and which may read thousands of units at once.
const workColumnsWithoutSealed = `id, account, state, key_id, NULL, queued_at, deadline,
	claimed_at, instance_id, claim_id, finished_at, NULL, reason,
	COALESCE(idempotency_key, '')`

// shownAccount is a unit's account as reads show it: its own, or, for a
// unit of an account being deleted, the tombstone AccountDelete is moving
// the account's units to (delete.go), as if it had moved it already.
const shownAccount = `COALESCE((SELECT moving_to FROM accounts WHERE accounts.name = work.account AND moving_to <> ''), work.account)`

// shownWorkColumns is workColumns with the account reads show
// (shownAccount), for the reads of units that may have ended.
const shownWorkColumns = `id, ` + shownAccount + `, ` + workColumnsAfterAccount

// shownWorkColumnsWithoutSealed is shownWorkColumns with NULL for the
// sealed command and result (WorkListParams.WithoutSealed).
const shownWorkColumnsWithoutSealed = `id, ` + shownAccount + `, state, key_id, NULL, queued_at, deadline,
	claimed_at, instance_id, claim_id, finished_at, NULL, reason,
	COALESCE(idempotency_key, '')`

func scanWork(r interface{ Scan(...any) error }) (store.Work, error) {
	var w store.Work
	var state string
	var queuedAt, deadline, claimedAt, finishedAt int64
	if err := r.Scan(&w.ID, &w.Account, &state, &w.KeyID, &w.SealedCommand, &queuedAt, &deadline,
		&claimedAt, &w.InstanceID, &w.ClaimID, &finishedAt, &w.SealedResult, &w.Reason, &w.IdempotencyKey); err != nil {
		return store.Work{}, err
	}
	w.State = store.State(state)
	w.QueuedAt = fromNanos(queuedAt)
	w.Deadline = fromNanos(deadline)
	w.ClaimedAt = fromNanos(claimedAt)
	w.FinishedAt = fromNanos(finishedAt)
	return w, nil
}

// getWork reads one unit; store.ErrNotFound when there is none.
func getWork(ctx context.Context, q querier, id string) (store.Work, error) {
	w, err := scanWork(q.QueryRowContext(ctx, `SELECT `+shownWorkColumns+` FROM work WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Work{}, store.ErrNotFound
	}
	return w, err
}

// byIdempotencyKeyQuery reads the unit of an account with an idempotency
// key (WorkEnqueue, WorkByIdempotencyKey).
const byIdempotencyKeyQuery = `SELECT ` + workColumns + ` FROM work WHERE account = ? AND idempotency_key = ?`

func (s *Store) WorkEnqueue(ctx context.Context, p store.WorkEnqueueParams) (store.Work, error) {
	if p.ID == "" {
		return store.Work{}, fmt.Errorf("enqueueing work for account %q: the id is empty", p.Account)
	}
	var w store.Work
	state, instance, claimID, claimedAt, claimPoll := store.StateQueued, "", "", int64(0), store.ClaimPoll{}
	if c := p.ClaimFor; c != nil {
		state, instance, claimID, claimedAt, claimPoll = store.StateClaimed, c.InstanceID, c.ClaimID, toNanos(p.Now), c.ClaimPoll
	}
	err := s.write1(ctx, p.SyncLater && p.ClaimFor == nil, func(ctx context.Context, tx querier) error {
		var key any // NULL when no key is given
		if p.IdempotencyKey != "" {
			key = p.IdempotencyKey
			prev, err := scanWork(tx.QueryRowContext(ctx, byIdempotencyKeyQuery, p.Account, p.IdempotencyKey))
			switch {
			case err == nil && !prev.QueuedAt.Before(p.IdempotencySince):
				w = prev
				return store.ErrDuplicate
			case err == nil:
				// Aged out of the retention window: forget the old key.
				if _, err := tx.ExecContext(ctx, `UPDATE work SET idempotency_key = NULL WHERE id = ?`, prev.ID); err != nil {
					return err
				}
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		// Only an account that is not being deleted (key id 0) takes a
		// unit: its row is kept while its units move (delete.go), so the
		// foreign key alone would not refuse one.
		res, err := tx.ExecContext(ctx, `INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, idempotency_key,
	instance_id, claim_id, claimed_at, claim_run, claim_poll)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM accounts WHERE name = ?2 AND key_id <> 0)
ON CONFLICT (id) DO NOTHING`,
			p.ID, p.Account, string(state), p.KeyID, nonNil(p.SealedCommand), toNanos(p.Now), toNanos(p.Deadline), key,
			instance, claimID, claimedAt, claimPoll.Run, claimPoll.Poll)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			var taken bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM work WHERE id = ?)`, p.ID).Scan(&taken); err != nil {
				return err
			}
			if taken {
				return store.ErrExists
			}
			return fmt.Errorf("account %q: %w", p.Account, store.ErrNotFound)
		}
		// The unit as stored, without reading it back.
		w = store.Work{
			ID:             p.ID,
			Account:        p.Account,
			State:          state,
			KeyID:          p.KeyID,
			SealedCommand:  bytes.Clone(nonNil(p.SealedCommand)),
			QueuedAt:       fromNanos(toNanos(p.Now)),
			Deadline:       fromNanos(toNanos(p.Deadline)),
			ClaimedAt:      fromNanos(claimedAt),
			InstanceID:     instance,
			ClaimID:        claimID,
			IdempotencyKey: p.IdempotencyKey,
		}
		if p.Audit != nil {
			_, err := insertAudit(ctx, tx, *p.Audit)
			return err
		}
		return nil
	})
	if errors.Is(err, store.ErrDuplicate) {
		if !p.SyncLater {
			// The caller hands w's id out (Submit), and w may be an
			// ExecuteOnProxy unit committed without its fsync, which
			// this write, rolled back, did not make: sync it first.
			if err := s.w.syncer.sync(); err != nil {
				return store.Work{}, fmt.Errorf("enqueueing work with idempotency key %q: writing its unit %s to disk: %w", p.IdempotencyKey, w.ID, err)
			}
		}
		return w, fmt.Errorf("enqueueing work with idempotency key %q: %w", p.IdempotencyKey, err)
	}
	if err != nil {
		return store.Work{}, fmt.Errorf("enqueueing work %q: %w", p.ID, err)
	}
	return w, nil
}

func (s *Store) WorkByIdempotencyKey(ctx context.Context, account, key string, since time.Time) (store.Work, error) {
	w, err := scanWork(s.reads.QueryRowContext(ctx, byIdempotencyKeyQuery, account, key))
	if errors.Is(err, sql.ErrNoRows) || err == nil && w.QueuedAt.Before(since) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Work{}, fmt.Errorf("getting the work of account %q with idempotency key %q: %w", account, key, err)
	}
	return w, nil
}

func (s *Store) WorkGet(ctx context.Context, id string) (store.Work, error) {
	w, err := getWork(ctx, s.reads, id)
	if err != nil {
		return store.Work{}, fmt.Errorf("getting work %q: %w", id, err)
	}
	return w, nil
}

// nextDeadlineQuery: the earliest deadline of an open unit, from
// work_open_deadline (whose WHERE its state term repeats word for word).
const nextDeadlineQuery = `SELECT MIN(deadline) FROM work WHERE state IN ('queued', 'claimed')`

func (s *Store) WorkNextDeadline(ctx context.Context) (time.Time, bool, error) {
	var deadline sql.NullInt64
	if err := s.reads.QueryRowContext(ctx, nextDeadlineQuery).Scan(&deadline); err != nil {
		return time.Time{}, false, fmt.Errorf("finding the next work deadline: %w", err)
	}
	if !deadline.Valid {
		return time.Time{}, false, nil
	}
	return fromNanos(deadline.Int64), true, nil
}

func (s *Store) WorkStates(ctx context.Context, account string, ids []string) (map[string]store.State, error) {
	out := make(map[string]store.State, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	// The ids travel as one JSON array, so the statement is the same for
	// any number of them (and is prepared once).
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("reading the states of %d units of work: %w", len(ids), err)
	}
	rows, err := s.reads.QueryContext(ctx, `SELECT id, state, account FROM work WHERE id IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, fmt.Errorf("reading the states of %d units of work: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, state, of string
		if err := rows.Scan(&id, &state, &of); err != nil {
			return nil, fmt.Errorf("reading the states of %d units of work: %w", len(ids), err)
		}
		if store.OfAccount(of, account) {
			out[id] = store.State(state)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the states of %d units of work: %w", len(ids), err)
	}
	return out, nil
}
