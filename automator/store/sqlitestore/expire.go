package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	limit := -1 // SQLite: no limit
	if p.Max > 0 {
		limit = p.Max
	}
	now := toNanos(p.Now)
	var reasons func(store.Work) string
	expired, err := s.timeOut(ctx, now, func(ctx context.Context, tx querier) ([]store.Work, error) {
		due, err := dueWork(ctx, tx, now, limit)
		if err != nil {
			return nil, err
		}
		if p.ID != "" && !slices.ContainsFunc(due, func(w store.Work) bool { return w.ID == p.ID }) {
			w, err := scanWork(tx.QueryRowContext(ctx, dueUnitQuery, p.ID, now))
			switch {
			case err == nil:
				due = append(due, w)
			case !errors.Is(err, sql.ErrNoRows):
				return nil, err
			}
		}
		instances, err := unclaimedInstances(ctx, tx, due, toNanos(p.OnlineSince))
		if err != nil {
			return nil, err
		}
		reasons = store.ExpireReasons(instances)
		return due, nil
	}, func(w store.Work) string { return reasons(w) }, p.Audit)
	if err != nil {
		return nil, fmt.Errorf("expiring work due by %s: %w", p.Now.Format(time.RFC3339Nano), err)
	}
	return expired, nil
}

// timeOut moves each unit read returns to timed_out, with the reason
// reasonFor gives it, only while it is still in the state it was read in,
// and appends audit (when not nil) for each it moved, in one write
// transaction. It returns the units it moved (WorkExpire, WorkEndOpen),
// without their sealed blobs, which nothing acting on a unit timed out
// reads.
func (s *Store) timeOut(ctx context.Context, now int64, read func(context.Context, querier) ([]store.Work, error), reasonFor func(store.Work) string, audit *store.AuditEvent) ([]store.Work, error) {
	var moved []store.Work
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		moved = moved[:0]
		units, err := read(ctx, tx)
		if err != nil {
			return err
		}
		for _, u := range units {
			w, err := scanWork(tx.QueryRowContext(ctx, `UPDATE work
SET state = 'timed_out', reason = ?, finished_at = ?
WHERE id = ? AND state = ?
RETURNING `+workColumnsWithoutSealed,
				reasonFor(u), now, u.ID, string(u.State)))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			if audit != nil {
				if _, err := insertAudit(ctx, tx, audit.ForWork(w)); err != nil {
					return err
				}
			}
			moved = append(moved, w)
		}
		return nil
	})
	return moved, err
}

// dueWorkQuery: the open units whose deadline is at or before now, without
// their sealed blobs (timeOut). Its state term is work_open_deadline's
// WHERE, word for word: SQLite uses a partial index only for a query whose
// WHERE implies the index's.
const dueWorkQuery = `SELECT ` + workColumnsWithoutSealed + ` FROM work
WHERE state IN ('queued', 'claimed') AND deadline <= ?
ORDER BY deadline, id
LIMIT ?`

// dueUnitQuery: the unit ?1 if it is open and its deadline is at or
// before ?2 (WorkExpireParams.ID).
const dueUnitQuery = `SELECT ` + workColumnsWithoutSealed + ` FROM work
WHERE id = ?1 AND state IN ('queued', 'claimed') AND deadline <= ?2`

// dueWork returns the open units whose deadline is at or before now, earliest
// deadline first.
func dueWork(ctx context.Context, tx querier, now int64, limit int) ([]store.Work, error) {
	rows, err := tx.QueryContext(ctx, dueWorkQuery, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var due []store.Work
	for rows.Next() {
		w, err := scanWork(rows)
		if err != nil {
			return nil, err
		}
		due = append(due, w)
	}
	return due, rows.Err()
}

// unclaimedInstancesQuery reads, for each account of a JSON array (?1), its
// first ?3 instances by latest poll, each row with the account's number of
// instances and of those online since ?2 (store.AccountInstances): a few
// rows per account, however many instances it has.
const unclaimedInstancesQuery = `SELECT account, instance_id, last_poll_at, stopped, refused_key_ids, token_expired, wrong_key, n, online, refused FROM (
	SELECT i.account, i.instance_id, i.last_poll_at, ` + instanceStopped + ` AS stopped,
		CASE WHEN ` + instanceRefused + ` THEN i.refused_key_ids ELSE '' END AS refused_key_ids,
		` + refusedTokenExpired + ` AS token_expired,
		` + refusedWrongKey + ` AS wrong_key,
		row_number() OVER (PARTITION BY i.account ORDER BY ` + refusedNow + ` DESC, i.last_poll_at DESC, i.instance_id) AS nth,
		count(*) OVER (PARTITION BY i.account) AS n,
		sum(i.last_poll_at >= ?2 AND NOT ` + instanceStopped + ` AND NOT ` + instanceRefused + `) OVER (PARTITION BY i.account) AS online,
		sum(` + refusedNow + `) OVER (PARTITION BY i.account) AS refused
	FROM instances i WHERE i.account IN (SELECT value FROM json_each(?1))
) WHERE nth <= ?3
ORDER BY account, nth`

// refusedNow is true for an instance that polled since ?2 and was refused
// at that poll (store.AccountInstances.Refused).
const refusedNow = `(i.last_poll_at >= ?2 AND NOT ` + instanceStopped + ` AND ` + instanceRefused + `)`

// unclaimedInstances reads the instances of the accounts of the units of due
// that no instance claimed (store.ExpireReasons), in one query; an account
// with none is left out.
func unclaimedInstances(ctx context.Context, tx querier, due []store.Work, onlineSince int64) (map[string]store.AccountInstances, error) {
	accounts := store.UnclaimedAccounts(due)
	if len(accounts) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(accounts)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, unclaimedInstancesQuery, string(list), onlineSince, store.ExpireNamed)
	if err != nil {
		return nil, fmt.Errorf("reading the instances of %d accounts: %w", len(accounts), err)
	}
	defer rows.Close()
	out := map[string]store.AccountInstances{}
	for rows.Next() {
		var in store.Instance
		var lastPoll int64
		var keyIDs string
		var n, online, refused int
		if err := rows.Scan(&in.Account, &in.InstanceID, &lastPoll, &in.Stopped, &keyIDs, &in.RefusedTokenExpired, &in.RefusedWrongKey, &n, &online, &refused); err != nil {
			return nil, fmt.Errorf("reading the instances of %d accounts: %w", len(accounts), err)
		}
		in.LastPollAt = fromNanos(lastPoll)
		if in.RefusedKeyIDs, err = store.ParseKeyIDsText(keyIDs); err != nil {
			return nil, fmt.Errorf("reading the instances of %d accounts: instance %q: %w", len(accounts), in.InstanceID, err)
		}
		a := out[in.Account]
		a.Instances, a.Online, a.Refused = n, online, refused
		a.Latest = append(a.Latest, in)
		out[in.Account] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the instances of %d accounts: %w", len(accounts), err)
	}
	if err := claimedByOnline(ctx, tx, list, onlineSince, out); err != nil {
		return nil, fmt.Errorf("counting the units the instances of %d accounts run: %w", len(accounts), err)
	}
	return out, nil
}

// claimedByOnlineQuery counts, for each account of a JSON array (?1), the
// units claimed by its instances online since ?2
// (store.AccountInstances.Claimed): the account's claimed units (the
// work_claimed index), each with its instance's record.
const claimedByOnlineQuery = `SELECT w.account, count(*) FROM work w
	JOIN instances i ON i.account = w.account AND i.instance_id = w.instance_id
	WHERE w.state = 'claimed' AND w.account IN (SELECT value FROM json_each(?1))
		AND i.last_poll_at >= ?2 AND NOT ` + instanceStopped + ` AND NOT ` + instanceRefused + `
	GROUP BY w.account`

// claimedByOnline sets the Claimed of the accounts of out, those of the
// JSON array list (claimedByOnlineQuery).
func claimedByOnline(ctx context.Context, tx querier, list []byte, onlineSince int64, out map[string]store.AccountInstances) error {
	rows, err := tx.QueryContext(ctx, claimedByOnlineQuery, string(list), onlineSince)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var account string
		var n int
		if err := rows.Scan(&account, &n); err != nil {
			return err
		}
		if a, ok := out[account]; ok {
			a.Claimed = n
			out[account] = a
		}
	}
	return rows.Err()
}
