package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

var workColumns = workColumnsOf("")

// workColumnsWithoutSealed is workColumns with NULL for the sealed command
// and result (WorkListParams.WithoutSealed, and the units timed out:
// expire.go).
var workColumnsWithoutSealed = withoutSealed("", workColumns)

// withoutSealed is cols, columns of table (when not empty) as
// workColumnsOf lists them, with NULL for the sealed command and result.
func withoutSealed(table, cols string) string {
	q := ""
	if table != "" {
		q = table + "."
	}
	return strings.NewReplacer(q+"sealed_command", "NULL::bytea", q+"sealed_result", "NULL::bytea").Replace(cols)
}

// workColumnsOf lists the columns scanWork reads, qualified by table when
// it is not empty.
func workColumnsOf(table string) string {
	q := ""
	if table != "" {
		q = table + "."
	}
	cols := []string{"id", "account", "state", "key_id", "sealed_command", "queued_at", "deadline",
		"claimed_at", "instance_id", "claim_id", "finished_at", "sealed_result", "reason"}
	for i, c := range cols {
		cols[i] = q + c
	}
	return strings.Join(cols, ", ") + ", COALESCE(" + q + "idempotency_key, '')"
}

func scanWork(r pgx.Row) (store.Work, error) { return scanWorkAfter(r) }

// scanWorkAfter scans a row of extra columns followed by workColumns.
func scanWorkAfter(r pgx.Row, extra ...any) (store.Work, error) {
	var w store.Work
	var state string
	var claimedAt, finishedAt *time.Time
	dest := append(extra, &w.ID, &w.Account, &state, &w.KeyID, &w.SealedCommand, &w.QueuedAt, &w.Deadline,
		&claimedAt, &w.InstanceID, &w.ClaimID, &finishedAt, &w.SealedResult, &w.Reason, &w.IdempotencyKey)
	if err := r.Scan(dest...); err != nil {
		return store.Work{}, err
	}
	w.State = store.State(state)
	w.QueuedAt = w.QueuedAt.UTC()
	w.Deadline = w.Deadline.UTC()
	w.ClaimedAt = fromNull(claimedAt)
	w.FinishedAt = fromNull(finishedAt)
	return w, nil
}

// querier is what the pool and a transaction have in common.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// getWorkQuery reads one unit by id.
var getWorkQuery = `SELECT ` + workColumns + ` FROM work WHERE id = $1`

// scanInto returns a scan function for Store.write and Store.gather that
// reads the row into w.
func scanInto(w *store.Work) func(pgx.Row) error {
	return func(r pgx.Row) (err error) {
		*w, err = scanWork(r)
		return err
	}
}

// getWork reads one unit; store.ErrNotFound when there is none.
func getWork(ctx context.Context, q querier, id string) (store.Work, error) {
	w, err := scanWork(q.QueryRow(ctx, getWorkQuery, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Work{}, store.ErrNotFound
	}
	return w, err
}

// enqueueAttempts bounds how often WorkEnqueue retries after losing a race
// for an idempotency key; the retry finds the winner's unit.
const enqueueAttempts = 3

// byIdempotencyKeyQuery reads the unit of an account with an idempotency
// key (WorkEnqueue, WorkByIdempotencyKey).
var byIdempotencyKeyQuery = `SELECT ` + workColumns + ` FROM work WHERE account = $1 AND idempotency_key = $2`

func (s *Store) WorkEnqueue(ctx context.Context, p store.WorkEnqueueParams) (store.Work, error) {
	if p.ID == "" {
		return store.Work{}, fmt.Errorf("enqueueing work for account %q: the id is empty", p.Account)
	}
	var w store.Work
	var err error
	for range enqueueAttempts {
		w, err = s.enqueueOnce(ctx, p)
		// A concurrent enqueue with the same key committed first (on this
		// replica or another): the unique index refused this one. Go again;
		// the next attempt reads that unit and returns it as the duplicate.
		if code, constraint := pgCode(err); code != codeUniqueViolation || constraint != "work_account_idempotency_key" {
			break
		}
	}
	if errors.Is(err, store.ErrDuplicate) {
		return w, fmt.Errorf("enqueueing work with idempotency key %q: %w", p.IdempotencyKey, err)
	}
	if err != nil {
		return store.Work{}, fmt.Errorf("enqueueing work %q: %w", p.ID, err)
	}
	return w, nil
}

func (s *Store) enqueueOnce(ctx context.Context, p store.WorkEnqueueParams) (store.Work, error) {
	if p.IdempotencyKey == "" {
		// One statement: it may share a transaction with other writes
		// (group.go).
		sql, args := insertWorkStatement(p, nil)
		var w store.Work
		err := s.write(ctx, sql, args, scanInto(&w))
		return insertedWork(p, w, err)
	}
	var w store.Work
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		prev, err := scanWork(tx.QueryRow(ctx, byIdempotencyKeyQuery, p.Account, p.IdempotencyKey))
		switch {
		case err == nil && !prev.QueuedAt.Before(p.IdempotencySince):
			w = prev
			return store.ErrDuplicate
		case err == nil:
			// Aged out of the retention window: forget the old key.
			if _, err := tx.Exec(ctx, `UPDATE work SET idempotency_key = NULL WHERE id = $1 AND idempotency_key = $2`, prev.ID, p.IdempotencyKey); err != nil {
				return err
			}
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		w, err = insertWork(ctx, tx, p, &p.IdempotencyKey)
		return err
	})
	return w, err
}

// insertWork inserts a new unit in tx, queued or claimed (p.ClaimFor);
// key is its idempotency key, nil for none.
func insertWork(ctx context.Context, tx pgx.Tx, p store.WorkEnqueueParams, key *string) (store.Work, error) {
	sql, args := insertWorkStatement(p, key)
	w, err := scanWork(tx.QueryRow(ctx, sql, args...))
	return insertedWork(p, w, err)
}

// insertWorkStatement is the statement that inserts a new unit and its
// audit event, and its arguments.
func insertWorkStatement(p store.WorkEnqueueParams, key *string) (string, []any) {
	state, instance, claimID, claimedAt, claimPoll := string(store.StateQueued), "", "", (*time.Time)(nil), store.ClaimPoll{}
	if c := p.ClaimFor; c != nil {
		state, instance, claimID, claimedAt, claimPoll = string(store.StateClaimed), c.InstanceID, c.ClaimID, &p.Now, c.ClaimPoll
	}
	args := []any{p.ID, p.Account, state, p.KeyID, nonNil(p.SealedCommand), p.Now, p.Deadline, key, instance, claimID, claimedAt, claimPoll.Run, claimPoll.Poll}
	a := p.Audit
	if a == nil {
		return `INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, idempotency_key, instance_id, claim_id, claimed_at, claim_run, claim_poll)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (id) DO NOTHING
RETURNING ` + workColumns, args
	}
	// The unit and its audit event in one statement, so in one
	// transaction: the event is written only with the unit.
	return `WITH w AS (
	INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, idempotency_key, instance_id, claim_id, claimed_at, claim_run, claim_poll)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
	ON CONFLICT (id) DO NOTHING
	RETURNING ` + workColumns + `
), a AS (
	INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
	SELECT $14, $15, $16, $17, $18, $19, $20, $21, $22, $23 FROM w
)
SELECT * FROM w`, append(args, a.At, a.Kind, a.Actor, a.Source, a.Account, a.WorkID, a.InstanceID, a.Outcome, a.SealedScript, a.Detail)
}

// insertedWork turns the outcome of insertWorkStatement into WorkEnqueue's.
func insertedWork(p store.WorkEnqueueParams, w store.Work, err error) (store.Work, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Work{}, store.ErrExists
	}
	if code, _ := pgCode(err); code == codeForeignKeyViolation {
		return store.Work{}, fmt.Errorf("account %q: %w", p.Account, store.ErrNotFound)
	}
	return w, err
}

func (s *Store) WorkByIdempotencyKey(ctx context.Context, account, key string, since time.Time) (store.Work, error) {
	w, err := scanWork(s.pool.QueryRow(ctx, byIdempotencyKeyQuery, account, key))
	if errors.Is(err, pgx.ErrNoRows) || err == nil && w.QueuedAt.Before(since) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Work{}, fmt.Errorf("getting the work of account %q with idempotency key %q: %w", account, key, err)
	}
	return w, nil
}

func (s *Store) WorkGet(ctx context.Context, id string) (store.Work, error) {
	if !store.Text(id) {
		return store.Work{}, fmt.Errorf("getting work %q: %w", id, store.ErrNotFound)
	}
	var w store.Work
	err := s.gather(&s.reads, ctx, getWorkQuery, []any{id}, scanInto(&w))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Work{}, fmt.Errorf("getting work %q: %w", id, err)
	}
	return w, nil
}

func (s *Store) WorkNextDeadline(ctx context.Context) (time.Time, bool, error) {
	var deadline *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT MIN(deadline) FROM work WHERE state IN ('queued', 'claimed')`).Scan(&deadline); err != nil {
		return time.Time{}, false, fmt.Errorf("finding the next work deadline: %w", err)
	}
	if deadline == nil {
		return time.Time{}, false, nil
	}
	return deadline.UTC(), true, nil
}

func (s *Store) WorkStates(ctx context.Context, account string, ids []string) (map[string]store.State, error) {
	out := make(map[string]store.State, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, state, account FROM work WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("reading the states of %d units of work: %w", len(ids), err)
	}
	var id, state, of string
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &of}, func() error {
		if store.OfAccount(of, account) {
			out[id] = store.State(state)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the states of %d units of work: %w", len(ids), err)
	}
	return out, nil
}
