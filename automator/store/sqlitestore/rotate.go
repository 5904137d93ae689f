package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) AccountGetByToken(ctx context.Context, p store.AccountGetByTokenParams) (store.Account, error) {
	h := nonNil(p.TokenHash)
	a, err := scanAccount(s.reads.QueryRowContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE token_hash = ? AND key_id <> 0`, h))
	if err == nil {
		return a, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return store.Account{}, fmt.Errorf("getting account by token: %w", err)
	}
	var until int64
	a, err = scanAccountAfter(s.reads.QueryRowContext(ctx, `SELECT t.valid_until, `+qualified("a", accountColumns)+`
FROM account_tokens t JOIN accounts a ON a.name = t.account
WHERE t.token_hash = ? AND a.key_id <> 0`, h), &until)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		// Never print the hash: it identifies a credential.
		return store.Account{}, fmt.Errorf("getting account by token: %w", err)
	}
	a.PreviousTokenUntil = fromNanos(until)
	if toNanos(p.Now) >= until {
		return a, fmt.Errorf("getting account by token: account %q: %w", a.Name, store.ErrExpired)
	}
	return a, nil
}

func (s *Store) AccountRotate(ctx context.Context, p store.AccountRotateParams) (store.Account, error) {
	now, until := toNanos(p.Now), toNanos(p.PreviousUntil)
	var out store.Account
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		cur, err := scanAccount(tx.QueryRowContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE name = ? AND key_id <> 0`, p.Name))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if p.KeyID != 0 {
			var highest int64
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(key_id), 0) FROM account_keys WHERE account = ?`, p.Name).Scan(&highest); err != nil {
				return err
			}
			if int64(p.KeyID) <= max(highest, int64(cur.KeyID)) {
				return fmt.Errorf("key id %d is not above every key id of the account: %w", p.KeyID, store.ErrExists)
			}
			if until <= now {
				// No overlap: the keys of earlier rotations end too.
				if _, err := tx.ExecContext(ctx, `UPDATE account_keys SET usable_until = ? WHERE account = ? AND usable_until > ?`, now, p.Name, now); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO account_keys (account, key_id, sealed_key, retired_at, usable_until) VALUES (?, ?, ?, ?, ?)`,
				p.Name, cur.KeyID, nonNil(cur.SealedKey), now, max(until, now)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE accounts SET key_id = ?, sealed_key = ? WHERE name = ?`, p.KeyID, nonNil(p.SealedKey), p.Name); err != nil {
				return err
			}
		}
		if p.TokenHash != nil {
			var taken int
			if err := tx.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM accounts WHERE token_hash = ?) + (SELECT COUNT(*) FROM account_tokens WHERE token_hash = ?)`,
				p.TokenHash, p.TokenHash).Scan(&taken); err != nil {
				return err
			}
			if taken > 0 || bytes.Equal(p.TokenHash, cur.TokenHash) {
				return fmt.Errorf("the new token: %w", store.ErrExists)
			}
			// Tokens past their window are of no use any more; with no
			// overlap, neither are those of earlier rotations.
			if _, err := tx.ExecContext(ctx, `DELETE FROM account_tokens WHERE account = ? AND (valid_until <= ? OR ? <= ?)`, p.Name, now, until, now); err != nil {
				return err
			}
			// The replaced token is kept, past its window with no overlap
			// (store.WithdrawnTokenUntil, not this host's now, which a
			// replica whose clock is behind would still be before),
			// until the next rotation: a proxy still polling with it is
			// told that it expired, and listed refused, not offline
			// (AccountGetByToken's ErrExpired).
			kept := until
			if until <= now {
				kept = toNanos(store.WithdrawnTokenUntil)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO account_tokens (token_hash, account, valid_until) VALUES (?, ?, ?)`,
				nonNil(cur.TokenHash), p.Name, kept); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE accounts SET token_hash = ? WHERE name = ?`, p.TokenHash, p.Name); err != nil {
				return err
			}
		}
		out, err = scanAccount(tx.QueryRowContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE name = ?`, p.Name))
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
	rows, err := s.reads.QueryContext(ctx, `SELECT key_id, sealed_key, retired_at, usable_until FROM account_keys
WHERE account = ? ORDER BY key_id DESC`, account)
	if err != nil {
		return nil, fmt.Errorf("reading keys of account %q: %w", account, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k store.AccountKey
		var retired, until int64
		if err := rows.Scan(&k.KeyID, &k.SealedKey, &retired, &until); err != nil {
			return nil, fmt.Errorf("reading keys of account %q: %w", account, err)
		}
		k.RetiredAt, k.UsableUntil = fromNanos(retired), fromNanos(until)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading keys of account %q: %w", account, err)
	}
	return out, nil
}

// AccountKeysPurge deletes the previous keys no unit needs any more (see
// store.Store). Each candidate's check is a seek in
// work_account_queued_at_id for its account's units queued before its
// time, never a scan of the account's units; the candidates, previous keys
// past their overlap, are few. Each sealed key is overwritten with zeros
// before its row is deleted, so that it does not linger in a page's free
// space.
func (s *Store) AccountKeysPurge(ctx context.Context, p store.AccountKeysPurgeParams) (int, error) {
	n := 0
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		n = 0
		rows, err := tx.QueryContext(ctx, `UPDATE account_keys SET sealed_key = zeroblob(length(sealed_key))
WHERE usable_until + ?1 < ?2
AND NOT EXISTS (SELECT 1 FROM work WHERE work.account = account_keys.account AND work.queued_at < account_keys.usable_until + ?1)
RETURNING account, key_id`, int64(p.Grace), toNanos(p.Now))
		if err != nil {
			return err
		}
		type version struct {
			account string
			keyID   int64
		}
		var gone []version
		for rows.Next() {
			var v version
			if err := rows.Scan(&v.account, &v.keyID); err != nil {
				rows.Close()
				return err
			}
			gone = append(gone, v)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, v := range gone {
			if _, err := tx.ExecContext(ctx, `DELETE FROM account_keys WHERE account = ? AND key_id = ?`, v.account, v.keyID); err != nil {
				return err
			}
		}
		n = len(gone)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("deleting previous keys no unit needs: %w", err)
	}
	return n, nil
}

// queuedCountQuery counts up to a limit of an account's queued units, from
// the partial index work_queued.
const queuedCountQuery = `SELECT COUNT(*) FROM (SELECT 1 FROM work WHERE account = ? AND state = 'queued' LIMIT ?)`

func (s *Store) WorkQueuedCount(ctx context.Context, account string, atMost int) (int, error) {
	limit := int64(atMost)
	if atMost <= 0 {
		limit = -1 // SQLite: no limit
	}
	var n int
	if err := s.reads.QueryRowContext(ctx, queuedCountQuery, account, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting queued units of account %q: %w", account, err)
	}
	return n, nil
}

// scanAccountAfter scans extra columns followed by accountColumns.
func scanAccountAfter(r interface{ Scan(...any) error }, extra ...any) (store.Account, error) {
	var a store.Account
	var createdAt int64
	if err := r.Scan(append(extra, &a.Name, &a.TokenHash, &a.KeyID, &a.SealedKey, &createdAt)...); err != nil {
		return store.Account{}, err
	}
	a.CreatedAt = fromNanos(createdAt)
	return a, nil
}

// qualified prefixes each of a comma-separated list of columns with table.
func qualified(table, columns string) string {
	parts := strings.Split(columns, ",")
	for i, c := range parts {
		parts[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
