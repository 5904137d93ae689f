package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	if len(p.ClaimIDs) < p.Max {
		return nil, fmt.Errorf("claiming work for account %q: %d claim ids for up to %d units", p.Account, len(p.ClaimIDs), p.Max)
	}
	now := toNanos(p.Now)
	// Most polls find nothing: look on the read pool first, so an empty
	// claim never waits for (or holds) the single write connection. The
	// write transaction below looks again, so a unit queued in between is
	// simply claimed by the next poll. A caller that expects a unit skips
	// the look, which would find one.
	if !p.Expect {
		var one int
		err := s.reads.QueryRowContext(ctx, claimProbeQuery, p.Account, now).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("claiming work for account %q: %w", p.Account, err)
		}
	}
	var claimed []store.Work
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		claimed = claimed[:0]
		cands, err := claimCandidates(ctx, tx, p.Account, now, p.Max)
		if err != nil {
			return err
		}
		total := 0
		for _, c := range cands {
			if p.MaxBytes > 0 && len(claimed) > 0 && total+c.size > p.MaxBytes {
				break // the oldest first: none overtakes the one left
			}
			id := c.id
			// The conditional write is the claim: only a row still queued
			// changes, and only changed rows come back. A unit queued after
			// now (its enqueue read the clock later and committed first) is
			// claimed at its queued_at, never before it.
			w, err := scanWork(tx.QueryRowContext(ctx, `UPDATE work
SET state = 'claimed', instance_id = ?, claim_id = ?, claimed_at = max(?, queued_at), claim_run = ?, claim_poll = ?
WHERE id = ? AND state = 'queued'
RETURNING `+workColumns,
				p.InstanceID, p.ClaimIDs[len(claimed)], now, p.Run, p.Poll, id))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			claimed = append(claimed, w)
			total += c.size
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claiming work for account %q: %w", p.Account, err)
	}
	return claimed, nil
}

// The claim's queries name state 'queued' as a literal, so that SQLite uses
// the partial index work_queued (TestHotQueriesUseTheirIndexes).
const (
	// claimProbeQuery: does the account have a unit to claim?
	claimProbeQuery = `SELECT 1 FROM work
WHERE account = ? AND state = 'queued' AND deadline > ? LIMIT 1`
	// claimCandidatesQuery: the account's oldest queued units whose
	// deadline is still ahead.
	claimCandidatesQuery = `SELECT id, length(sealed_command) FROM work
WHERE account = ? AND state = 'queued' AND deadline > ?
ORDER BY queued_at, id
LIMIT ?`
)

// candidate is a unit claimCandidates found: its id and the size of its
// sealed command.
type candidate struct {
	id   string
	size int
}

// claimCandidates returns the account's oldest queued units whose deadline
// is still ahead.
func claimCandidates(ctx context.Context, tx querier, account string, now int64, max int) ([]candidate, error) {
	rows, err := tx.QueryContext(ctx, claimCandidatesQuery, account, now, max)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cands []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.id, &c.size); err != nil {
			return nil, err
		}
		cands = append(cands, c)
	}
	return cands, rows.Err()
}

// claimedByPollsQuery names state 'claimed' as a literal, so that SQLite
// uses the partial index work_claimed.
const claimedByPollsQuery = `SELECT ` + workColumns + ` FROM work
WHERE account = ? AND state = 'claimed' AND instance_id = ? AND claim_run = ? AND claim_poll BETWEEN ? AND ?
ORDER BY queued_at, id`

func (s *Store) WorkClaimedByPolls(ctx context.Context, p store.WorkClaimedByPollsParams) ([]store.Work, error) {
	if p.Run == "" {
		return nil, nil
	}
	rows, err := s.reads.QueryContext(ctx, claimedByPollsQuery, p.Account, p.InstanceID, p.Run, p.FromPoll, p.ToPoll)
	if err != nil {
		return nil, fmt.Errorf("reading the units claimed by polls of instance %q: %w", p.InstanceID, err)
	}
	defer rows.Close()
	var ws []store.Work
	for rows.Next() {
		w, err := scanWork(rows)
		if err != nil {
			return nil, fmt.Errorf("reading the units claimed by polls of instance %q: %w", p.InstanceID, err)
		}
		ws = append(ws, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the units claimed by polls of instance %q: %w", p.InstanceID, err)
	}
	return ws, nil
}
