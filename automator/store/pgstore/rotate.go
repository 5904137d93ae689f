package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) AccountGetByToken(ctx context.Context, p store.AccountGetByTokenParams) (store.Account, error) {
	h := nonNil(p.TokenHash)
	// The current token, else a previous one: one round trip.
	var until *time.Time
	var a store.Account
	err := s.pool.QueryRow(ctx, `SELECT NULL::timestamptz, `+accountColumns+` FROM accounts WHERE token_hash = $1 AND key_id <> 0
UNION ALL
SELECT t.valid_until, a.name, a.token_hash, a.key_id, a.sealed_key, a.created_at
FROM account_tokens t JOIN accounts a ON a.name = t.account
WHERE t.token_hash = $1 AND a.key_id <> 0
LIMIT 1`, h).Scan(&until, &a.Name, &a.TokenHash, &a.KeyID, &a.SealedKey, &a.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		// Never print the hash: it identifies a credential.
		return store.Account{}, fmt.Errorf("getting account by token: %w", err)
	}
	a.CreatedAt = a.CreatedAt.UTC()
	a.PreviousTokenUntil = fromNull(until)
	if until != nil && !p.Now.Before(*until) {
		return a, fmt.Errorf("getting account by token: account %q: %w", a.Name, store.ErrExpired)
	}
	return a, nil
}

func (s *Store) AccountRotate(ctx context.Context, p store.AccountRotateParams) (store.Account, error) {
	until := p.PreviousUntil
	if until.Before(p.Now) {
		until = p.Now
	}
	var out store.Account
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		// FOR UPDATE: concurrent rotations of one account take turns.
		cur, err := scanAccount(tx.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE name = $1 AND key_id <> 0 FOR UPDATE`, p.Name))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if p.KeyID != 0 {
			var highest int64
			if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(key_id), 0) FROM account_keys WHERE account = $1`, p.Name).Scan(&highest); err != nil {
				return err
			}
			if int64(p.KeyID) <= max(highest, int64(cur.KeyID)) {
				return fmt.Errorf("key id %d is not above every key id of the account: %w", p.KeyID, store.ErrExists)
			}
			if !until.After(p.Now) {
				// No overlap: the keys of earlier rotations end too.
				if _, err := tx.Exec(ctx, `UPDATE account_keys SET usable_until = $2 WHERE account = $1 AND usable_until > $2`, p.Name, p.Now); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO account_keys (account, key_id, sealed_key, retired_at, usable_until) VALUES ($1, $2, $3, $4, $5)`,
				p.Name, cur.KeyID, nonNil(cur.SealedKey), p.Now, until); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE accounts SET key_id = $2, sealed_key = $3 WHERE name = $1`, p.Name, p.KeyID, nonNil(p.SealedKey)); err != nil {
				return err
			}
		}
		if p.TokenHash != nil {
			var taken bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE token_hash = $1) OR EXISTS (SELECT 1 FROM account_tokens WHERE token_hash = $1)`,
				p.TokenHash).Scan(&taken); err != nil {
				return err
			}
			if taken || bytes.Equal(p.TokenHash, cur.TokenHash) {
				return fmt.Errorf("the new token: %w", store.ErrExists)
			}
			// Tokens past their window are of no use any more; with no
			// overlap, neither are those of earlier rotations.
			if _, err := tx.Exec(ctx, `DELETE FROM account_tokens WHERE account = $1 AND (valid_until <= $2 OR $3)`, p.Name, p.Now, !until.After(p.Now)); err != nil {
				return err
			}
			// The replaced token is kept, past its window with no overlap
			// (store.WithdrawnTokenUntil, not this host's now, which a
			// replica whose clock is behind would still be before),
			// until the next rotation: a proxy still polling with it is
			// told that it expired, and listed refused, not offline
			// (AccountGetByToken's ErrExpired).
			kept := until
			if !kept.After(p.Now) {
				kept = store.WithdrawnTokenUntil
			}
			if _, err := tx.Exec(ctx, `INSERT INTO account_tokens (token_hash, account, valid_until) VALUES ($1, $2, $3)`,
				nonNil(cur.TokenHash), p.Name, kept); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE accounts SET token_hash = $2 WHERE name = $1`, p.Name, p.TokenHash); err != nil {
				if code, _ := pgCode(err); code == codeUniqueViolation {
					return fmt.Errorf("the new token: %w", store.ErrExists)
				}
				return err
			}
		}
		out, err = scanAccount(tx.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE name = $1`, p.Name))
		if err != nil {
			return err
		}
		return appendAudit(ctx, tx, p.Audit)
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("rotating account %q: %w", p.Name, err)
	}
	return out, nil
}

func (s *Store) AccountKeys(ctx context.Context, account string) ([]store.AccountKey, error) {
	a, err := s.AccountGet(ctx, account)
	if err != nil {
		return nil, fmt.Errorf("reading keys of account %q: %w", account, err)
	}
	out := []store.AccountKey{{KeyID: a.KeyID, SealedKey: a.SealedKey, Current: true}}
	rows, err := s.pool.Query(ctx, `SELECT key_id, sealed_key, retired_at, usable_until FROM account_keys
WHERE account = $1 ORDER BY key_id DESC`, account)
	if err != nil {
		return nil, fmt.Errorf("reading keys of account %q: %w", account, err)
	}
	prev, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AccountKey, error) {
		var k store.AccountKey
		err := r.Scan(&k.KeyID, &k.SealedKey, &k.RetiredAt, &k.UsableUntil)
		k.RetiredAt, k.UsableUntil = k.RetiredAt.UTC(), k.UsableUntil.UTC()
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading keys of account %q: %w", account, err)
	}
	return append(out, prev...), nil
}

// AccountKeysPurge deletes the previous keys no unit needs any more (see
// store.Store). Each candidate's check, a subquery run per candidate (not
// an anti-join the planner could make a scan of work), is a seek in
// work_account_queued_at_id for its account's units queued before its
// time; the candidates, previous keys past their overlap, are few.
func (s *Store) AccountKeysPurge(ctx context.Context, p store.AccountKeysPurgeParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM account_keys k
WHERE k.usable_until + $1::interval < $2
AND (SELECT 1 FROM work w WHERE w.account = k.account AND w.queued_at < k.usable_until + $1::interval LIMIT 1) IS NULL`, p.Grace, p.Now)
	if err != nil {
		return 0, fmt.Errorf("deleting previous keys no unit needs: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

func (s *Store) WorkQueuedCount(ctx context.Context, account string, atMost int) (int, error) {
	var limit *int // NULL: no limit
	if atMost > 0 {
		limit = &atMost
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM work WHERE account = $1 AND state = 'queued' LIMIT $2) q`,
		account, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting queued units of account %q: %w", account, err)
	}
	return n, nil
}
