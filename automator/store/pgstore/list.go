package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("listing work: limit %d must be positive", p.Limit)
	}
	q, args := workListQuery(p)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing work: %w", err)
	}
	out, err := pgx.CollectRows(rows, rowTo(scanWork))
	if err != nil {
		return nil, fmt.Errorf("listing work: %w", err)
	}
	return out, nil
}

// workListQuery returns WorkList's statement for p and its arguments.
func workListQuery(p store.WorkListParams) (string, []any) {
	// Only the filters given take part, so the planner picks the index that
	// fits each combination.
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if p.Account != "" {
		where = append(where, "account = "+arg(p.Account))
	}
	switch {
	case p.State.Valid():
		// The state as a literal, not a parameter: the partial indexes of
		// the open units (work_queued, work_claimed, work_open_deadline)
		// and of the units that ended without success
		// (work_account_unsuccessful, work_unsuccessful) serve only a plan
		// made knowing the state, and a prepared statement's generic plan,
		// which PostgreSQL may switch to after five runs, is made without
		// its parameters: it walked every unit newest first instead.
		where = append(where, "state = '"+string(p.State)+"'")
	case p.State != "":
		where = append(where, "state = "+arg(string(p.State)))
	}
	if !p.BeforeQueuedAt.IsZero() {
		where = append(where, "(queued_at, id) < ("+arg(p.BeforeQueuedAt)+", "+arg(p.BeforeID)+")")
	}
	cols := workColumns
	if p.WithoutSealed {
		cols = workColumnsWithoutSealed
	}
	q := `SELECT ` + cols + ` FROM work`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY queued_at DESC, id DESC LIMIT ` + arg(p.Limit)
	return q, args
}

func (s *Store) AccountStats(ctx context.Context, p store.AccountStatsParams) ([]store.AccountStats, error) {
	if !store.Text(p.Account) {
		return nil, nil // no account's name, as in SQLite, rather than an error of the query
	}
	where, args := `a.key_id <> 0`, []any{p.OnlineSince}
	if p.Account != "" {
		// One account's page reads its row alone, found by name.
		where += ` AND a.name = $2`
		args = append(args, p.Account)
	}
	rows, err := s.pool.Query(ctx, `SELECT a.name,
	(SELECT COUNT(*) FROM work w WHERE w.account = a.name AND w.state = 'queued'),
	(SELECT MIN(w.queued_at) FROM work w WHERE w.account = a.name AND w.state = 'queued'),
	(SELECT COUNT(*) FROM work w WHERE w.account = a.name AND w.state = 'claimed'),
	(SELECT COUNT(*) FROM instances i WHERE i.account = a.name),
	(SELECT COUNT(*) FROM instances i WHERE i.account = a.name AND i.last_poll_at >= $1 AND NOT `+instanceStopped+` AND NOT `+instanceRefused+`),
	(SELECT COUNT(*) FROM instances i WHERE i.account = a.name AND i.last_poll_at >= $1 AND NOT `+instanceStopped+` AND `+instanceRefused+`),
	(SELECT MAX(i.last_poll_at) FROM instances i WHERE i.account = a.name)
FROM accounts a WHERE `+where+` ORDER BY a.name`, args...)
	if err != nil {
		return nil, fmt.Errorf("reading account statistics: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AccountStats, error) {
		var a store.AccountStats
		var oldest, lastPoll *time.Time
		err := r.Scan(&a.Account, &a.Queued, &oldest, &a.Claimed, &a.Instances, &a.InstancesOnline, &a.InstancesRefused, &lastPoll)
		a.OldestQueuedAt = fromNull(oldest)
		a.LastPollAt = fromNull(lastPoll)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading account statistics: %w", err)
	}
	return out, nil
}
