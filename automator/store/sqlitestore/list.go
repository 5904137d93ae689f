package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("listing work: limit %d must be positive", p.Limit)
	}
	var movingFrom string
	if _, tomb := store.DeletedAccount(p.Account); tomb {
		// An account whose units are moving to this tombstone.
		err := s.reads.QueryRowContext(ctx, `SELECT name FROM accounts WHERE moving_to = ?`, p.Account).Scan(&movingFrom)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("listing work: %w", err)
		}
	}
	q, args := workListQuery(p, movingFrom)
	rows, err := s.reads.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing work: %w", err)
	}
	defer rows.Close()
	var out []store.Work
	for rows.Next() {
		w, err := scanWork(rows)
		if err != nil {
			return nil, fmt.Errorf("listing work: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing work: %w", err)
	}
	return out, nil
}

// workListQuery returns WorkList's statement for p and its arguments.
// movingFrom is the account whose units are moving to p.Account, a
// tombstone (delete.go), if any.
func workListQuery(p store.WorkListParams, movingFrom string) (string, []any) {
	// Only the filters given take part, so each query can use the index
	// that fits it (work_queued, work_claimed, work_account_unsuccessful,
	// work_unsuccessful, work_queued_at_id, work_account_queued_at_id).
	var where []string
	var args []any
	switch {
	case movingFrom != "":
		// The units of the tombstone, and those shown as its while they
		// wait to move, as of this statement (the move may end, and an
		// account of that name be made again, since movingFrom was read).
		where = append(where, "account IN (?, ?) AND "+shownAccount+" = ?")
		args = append(args, p.Account, movingFrom, p.Account)
	case p.Account != "":
		// None while the account is being deleted: its units are its
		// tombstone's (shownAccount).
		where = append(where, "account = ? AND NOT EXISTS (SELECT 1 FROM accounts WHERE name = ? AND moving_to <> '')")
		args = append(args, p.Account, p.Account)
	}
	from := "work"
	switch p.State {
	case "":
	case store.StateQueued, store.StateClaimed:
		// The state as a literal, not a parameter: SQLite uses the partial
		// index of an open state (work_queued, work_claimed) only for a
		// statement that names the state. The index is named too: the open
		// units are few, so the whole index read and sorted beats walking
		// every unit by queued_at, which the planner (without statistics)
		// picks for a page after the first.
		where = append(where, "state = '"+string(p.State)+"'")
		from = "work INDEXED BY work_" + string(p.State)
	case store.StateFailed, store.StateTimedOut, store.StateCancelled:
		// A literal too, for the partial index of these states
		// (work_account_unsuccessful, work_unsuccessful).
		where = append(where, "state = '"+string(p.State)+"'")
	default:
		where = append(where, "state = ?")
		args = append(args, string(p.State))
	}
	if !p.BeforeQueuedAt.IsZero() {
		// The cursor as a row value (as in pgstore): SQLite then searches
		// the listing's index, which ends in (queued_at, id), from the
		// cursor on: "SEARCH work USING INDEX work_queued_at_id
		// ((queued_at,id)<(?,?))". Written "queued_at < ? OR (queued_at = ?
		// AND id < ?)" with bound parameters, it was planned as a walk from
		// the newest unit ("SCAN work USING INDEX work_queued_at_id", or
		// "SEARCH ... (account=?)" by an account's), reading every unit
		// before the page: slower the deeper the page.
		where = append(where, "(queued_at, id) < (?, ?)")
		args = append(args, toNanos(p.BeforeQueuedAt), p.BeforeID)
	}
	cols := shownWorkColumns
	if p.WithoutSealed {
		cols = shownWorkColumnsWithoutSealed
	}
	q := `SELECT ` + cols + ` FROM ` + from
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY queued_at DESC, id DESC LIMIT ?`
	args = append(args, p.Limit)
	return q, args
}

// accountStatsQuery returns AccountStats' statement for p and its
// arguments: of one account, a search of the accounts by name
// (TestHotQueriesUseTheirIndexes), not a scan of them all.
func accountStatsQuery(p store.AccountStatsParams) (string, []any) {
	where, args := `a.key_id <> 0`, []any{toNanos(p.OnlineSince)}
	if p.Account != "" {
		where += ` AND a.name = ?2`
		args = append(args, p.Account)
	}
	return `SELECT a.name,
	(SELECT COUNT(*) FROM work w WHERE w.account = a.name AND w.state = 'queued'),
	(SELECT COALESCE(MIN(w.queued_at), 0) FROM work w WHERE w.account = a.name AND w.state = 'queued'),
	(SELECT COUNT(*) FROM work w WHERE w.account = a.name AND w.state = 'claimed'),
	(SELECT COUNT(*) FROM instances i WHERE i.account = a.name),
	(SELECT COUNT(*) FROM instances i WHERE i.account = a.name AND i.last_poll_at >= ?1 AND NOT ` + instanceStopped + ` AND NOT ` + instanceRefused + `),
	(SELECT COUNT(*) FROM instances i WHERE i.account = a.name AND i.last_poll_at >= ?1 AND NOT ` + instanceStopped + ` AND ` + instanceRefused + `),
	(SELECT COALESCE(MAX(i.last_poll_at), 0) FROM instances i WHERE i.account = a.name)
FROM accounts a WHERE ` + where + ` ORDER BY a.name`, args
}

func (s *Store) AccountStats(ctx context.Context, p store.AccountStatsParams) ([]store.AccountStats, error) {
	q, args := accountStatsQuery(p)
	rows, err := s.reads.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("reading account statistics: %w", err)
	}
	defer rows.Close()
	var out []store.AccountStats
	for rows.Next() {
		var a store.AccountStats
		var oldest, lastPoll int64
		if err := rows.Scan(&a.Account, &a.Queued, &oldest, &a.Claimed, &a.Instances, &a.InstancesOnline, &a.InstancesRefused, &lastPoll); err != nil {
			return nil, fmt.Errorf("reading account statistics: %w", err)
		}
		a.OldestQueuedAt = fromNanos(oldest)
		a.LastPollAt = fromNanos(lastPoll)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading account statistics: %w", err)
	}
	return out, nil
}
