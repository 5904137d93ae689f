package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
)

// WorkExpire is safe with any number of replicas sweeping at once, and
// holds no lock across a round trip: a replica that hangs in the middle of
// its sweep (stopped, frozen, cut off from PostgreSQL) keeps no unit from
// the others' sweepers. It reads the due units without locking them (and,
// when one was never claimed, its account's instances: unclaimedInstances),
// then times them out in one statement, each only while it is still in the state
// it was read in (so no unit is expired twice nor after it ended
// otherwise; a unit claimed meanwhile is left to the next sweep) and not
// locked by another session (timeOut), with its audit record. PostgreSQL runs and commits that statement whether or not
// the replica is still there to read the answer.
func (s *Store) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	var limit *int // NULL: no limit
	if p.Max > 0 {
		limit = &p.Max
	}
	fail := func(err error) ([]store.Work, error) {
		return nil, fmt.Errorf("expiring work due by %s: %w", p.Now.Format(time.RFC3339Nano), err)
	}
	// Without their sealed blobs, which nothing that acts on a unit timed
	// out reads, and which for thousands of units due at once would weigh
	// gigabytes.
	rows, err := s.pool.Query(ctx, `SELECT `+workColumnsWithoutSealed+` FROM work
WHERE state IN ('queued', 'claimed') AND deadline <= $1
ORDER BY deadline, id
LIMIT $2`, p.Now, limit)
	if err != nil {
		return fail(err)
	}
	due, err := pgx.CollectRows(rows, rowTo(scanWork))
	if err != nil {
		return fail(err)
	}
	if p.ID != "" && !slices.ContainsFunc(due, func(w store.Work) bool { return w.ID == p.ID }) {
		rows, err := s.pool.Query(ctx, `SELECT `+workColumnsWithoutSealed+` FROM work
WHERE id = $1 AND state IN ('queued', 'claimed') AND deadline <= $2`, p.ID, p.Now)
		if err != nil {
			return fail(err)
		}
		own, err := pgx.CollectRows(rows, rowTo(scanWork))
		if err != nil {
			return fail(err)
		}
		due = append(due, own...)
	}
	if len(due) == 0 {
		return nil, nil
	}
	instances, err := s.unclaimedInstances(ctx, due, p.OnlineSince)
	if err != nil {
		return fail(err)
	}
	var expired []store.Work
	if err := s.sentAgain(ctx, func(ctx context.Context, c *pgxpool.Conn) (err error) {
		expired, err = timeOut(ctx, c, p.Now, due, store.ExpireReasons(instances), p.Audit)
		return err
	}); err != nil {
		return fail(err)
	}
	return expired, nil
}

// unclaimedInstances reads the instances of the accounts of the units of
// due that no instance claimed (store.ExpireReasons), in one query, without
// locking them: for each account its first store.ExpireNamed instances by
// latest poll, each row with the account's number of instances and of
// those online since onlineSince. An account with none is left out. It is
// one round trip per sweep, and only for a sweep that ends a unit never
// claimed. The records are the ones every replica writes, so any replica
// that sweeps gives the same reason.
func (s *Store) unclaimedInstances(ctx context.Context, due []store.Work, onlineSince time.Time) (map[string]store.AccountInstances, error) {
	accounts := store.UnclaimedAccounts(due)
	if len(accounts) == 0 {
		return nil, nil
	}
	// refusedNow: polled since onlineSince and refused at that poll for
	// want of a usable key, for a wrong key or for an expired token
	// (store.AccountInstances.Refused).
	const refusedNow = `(i.last_poll_at >= $2 AND NOT ` + instanceStopped + ` AND ` + instanceRefused + `)`
	rows, err := s.pool.Query(ctx, `SELECT account, instance_id, last_poll_at, stopped, refused_key_ids, token_expired, wrong_key, n, online, refused FROM (
	SELECT i.account, i.instance_id, i.last_poll_at, `+instanceStopped+` AS stopped,
		CASE WHEN `+instanceRefused+` THEN i.refused_key_ids ELSE '' END AS refused_key_ids,
		`+refusedTokenExpired+` AS token_expired,
		`+refusedWrongKey+` AS wrong_key,
		row_number() OVER (PARTITION BY i.account ORDER BY `+refusedNow+` DESC, i.last_poll_at DESC, i.instance_id) AS nth,
		count(*) OVER (PARTITION BY i.account) AS n,
		count(*) FILTER (WHERE i.last_poll_at >= $2 AND NOT `+instanceStopped+` AND NOT `+instanceRefused+`) OVER (PARTITION BY i.account) AS online,
		count(*) FILTER (WHERE `+refusedNow+`) OVER (PARTITION BY i.account) AS refused
	FROM instances i WHERE i.account = ANY($1::text[])
) t WHERE nth <= $3
ORDER BY account, nth`, accounts, onlineSince, store.ExpireNamed)
	if err != nil {
		return nil, fmt.Errorf("reading the instances of %d accounts: %w", len(accounts), err)
	}
	out := map[string]store.AccountInstances{}
	var in store.Instance
	var keyIDs string
	var n, online, refused int
	_, err = pgx.ForEachRow(rows, []any{&in.Account, &in.InstanceID, &in.LastPollAt, &in.Stopped, &keyIDs, &in.RefusedTokenExpired, &in.RefusedWrongKey, &n, &online, &refused}, func() error {
		a := out[in.Account]
		a.Instances, a.Online, a.Refused = n, online, refused
		i := in
		i.LastPollAt = i.LastPollAt.UTC()
		var err error
		if i.RefusedKeyIDs, err = store.ParseKeyIDsText(keyIDs); err != nil {
			return fmt.Errorf("instance %q: %w", i.InstanceID, err)
		}
		a.Latest = append(a.Latest, i)
		out[in.Account] = a
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the instances of %d accounts: %w", len(accounts), err)
	}
	// The units the online instances run (store.AccountInstances.Claimed):
	// the accounts' claimed units (the work_claimed index), each with its
	// instance's record.
	rows, err = s.pool.Query(ctx, `SELECT w.account, count(*) FROM work w
	JOIN instances i ON i.account = w.account AND i.instance_id = w.instance_id
	WHERE w.state = 'claimed' AND w.account = ANY($1::text[])
		AND i.last_poll_at >= $2 AND NOT `+instanceStopped+` AND NOT `+instanceRefused+`
	GROUP BY w.account`, accounts, onlineSince)
	if err != nil {
		return nil, fmt.Errorf("counting the units the instances of %d accounts run: %w", len(accounts), err)
	}
	var account string
	var claimed int
	_, err = pgx.ForEachRow(rows, []any{&account, &claimed}, func() error {
		if a, ok := out[account]; ok {
			a.Claimed = claimed
			out[account] = a
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counting the units the instances of %d accounts run: %w", len(accounts), err)
	}
	return out, nil
}

// timeOut moves each of units to timed_out, with the reason reasonFor
// gives it, only while it is still in the state it was read in, and
// appends audit (when not nil) for each it moved: one statement. It returns
// the units it moved (WorkExpire, WorkEndOpen).
//
// It skips a unit whose row another session holds locked rather than wait
// for it: that session is about to change the unit (a completion, a
// cancel), or its replica died or was cut off in the middle of sending it,
// and PostgreSQL holds the lock until it finds the connection dead. Every
// other due unit must not wait so long; the skipped one is left to a later
// sweep. (Rows the caller's own transaction locked are not skipped.)
func timeOut(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, now time.Time, units []store.Work, reasonFor func(store.Work) string, audit *store.AuditEvent) ([]store.Work, error) {
	ids := make([]string, len(units))
	states := make([]string, len(units))
	reasons := make([]string, len(units))
	for i, u := range units {
		ids[i], states[i], reasons[i] = u.ID, string(u.State), reasonFor(u)
	}
	var a store.AuditEvent
	if audit != nil {
		if audit.Kind == "" {
			return nil, fmt.Errorf("appending to the audit log: the event has no kind")
		}
		a = *audit
	}
	rows, err := q.Query(ctx, `WITH due AS (
	SELECT work.id, d.state, d.reason
	FROM work JOIN unnest($2::text[], $3::text[], $4::text[]) AS d (id, state, reason)
		ON work.id = d.id AND work.state = d.state
	FOR UPDATE OF work SKIP LOCKED
), done AS (
	UPDATE work SET state = 'timed_out', reason = due.reason, finished_at = $1
	FROM due
	WHERE work.id = due.id AND work.state = due.state
	RETURNING `+withoutSealed("work", workColumnsOf("work"))+`
), audited AS (
	INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
	SELECT $6, $7, $8, $9, done.account, done.id, COALESCE(done.instance_id, ''), done.state, $10, $11
	FROM done WHERE $5
)
SELECT * FROM done`, now, ids, states, reasons, audit != nil,
		a.At, a.Kind, a.Actor, a.Source, a.SealedScript, a.Detail)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, rowTo(scanWork))
}
