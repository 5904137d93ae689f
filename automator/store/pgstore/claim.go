package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
)

// claimSQL claims in one statement, so in one transaction: the CTE locks
// the account's oldest queued units that are still ahead of their deadline,
// skipping rows another claimer has locked (FOR UPDATE SKIP LOCKED: no
// claimer waits for another, none takes a locked row), numbers them oldest
// first, and the UPDATE moves each to claimed only while it is still queued
// (the conditional write that makes a claim happen at most once), the n-th
// with the n-th claim id. With a byte budget ($8 above 0) it stops before
// the first unit whose sealed command, with those of the units before it,
// is past the budget; the first unit is claimed whatever its size. A unit
// queued after $2 (its enqueue read the clock later, or on a replica whose
// clock runs ahead, and committed before this claim looked) is claimed at
// its queued_at, never before it.
var claimSQL = `WITH picked AS (
	SELECT id, queued_at, octet_length(sealed_command) AS size FROM work
	WHERE account = $1 AND state = 'queued' AND deadline > $2
	ORDER BY queued_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), numbered AS (
	SELECT id, row_number() OVER w AS n, sum(size) OVER w AS total FROM picked
	WINDOW w AS (ORDER BY queued_at, id)
)
UPDATE work SET state = 'claimed', instance_id = $4, claim_id = ($5::text[])[numbered.n], claimed_at = GREATEST($2, work.queued_at),
	claim_run = $6, claim_poll = $7
FROM numbered
WHERE work.id = numbered.id AND work.state = 'queued' AND (numbered.n = 1 OR $8::bigint <= 0 OR numbered.total <= $8::bigint)
RETURNING numbered.n, ` + workColumnsOf("work")

func (s *Store) WorkClaim(ctx context.Context, p store.WorkClaimParams) ([]store.Work, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	if len(p.ClaimIDs) < p.Max {
		return nil, fmt.Errorf("claiming work for account %q: %d claim ids for up to %d units", p.Account, len(p.ClaimIDs), p.Max)
	}
	type numbered struct {
		n int64
		w store.Work
	}
	var claimed []numbered
	// Once sent, the claim runs to its end (Store.sent): its caller gets
	// the units it committed.
	err := s.sentAgain(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		rows, err := c.Query(ctx, claimSQL, p.Account, p.Now, p.Max, p.InstanceID, p.ClaimIDs[:p.Max], p.Run, p.Poll, p.MaxBytes)
		if err != nil {
			return err
		}
		claimed, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (numbered, error) {
			var c numbered
			var err error
			c.w, err = scanWorkAfter(r, &c.n)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming work for account %q: %w", p.Account, err)
	}
	// RETURNING has no order: put them back oldest first, the order their
	// claim ids were handed out in.
	slices.SortFunc(claimed, func(a, b numbered) int { return cmp.Compare(a.n, b.n) })
	out := make([]store.Work, len(claimed))
	for i, c := range claimed {
		out[i] = c.w
	}
	return out, nil
}

func (s *Store) WorkClaimedByPolls(ctx context.Context, p store.WorkClaimedByPollsParams) ([]store.Work, error) {
	if p.Run == "" {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+workColumns+` FROM work
WHERE account = $1 AND state = 'claimed' AND instance_id = $2 AND claim_run = $3 AND claim_poll BETWEEN $4 AND $5
ORDER BY queued_at, id`, p.Account, p.InstanceID, p.Run, p.FromPoll, p.ToPoll)
	if err != nil {
		return nil, fmt.Errorf("reading the units claimed by polls of instance %q: %w", p.InstanceID, err)
	}
	ws, err := pgx.CollectRows(rows, rowTo(scanWork))
	if err != nil {
		return nil, fmt.Errorf("reading the units claimed by polls of instance %q: %w", p.InstanceID, err)
	}
	return ws, nil
}
