package sqlitestore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) AccountDelete(ctx context.Context, p store.AccountDeleteParams) (store.AccountDeletion, error) {
	now := toNanos(p.Now)
	d := store.AccountDeletion{Name: p.Name, Tombstone: store.DeletedAccountName(p.Name, p.Now), DeletedAt: fromNanos(now)}
	// The tombstone's token is random: nobody holds it, and no lookup of
	// a token returns a tombstone anyway.
	var token [32]byte
	rand.Read(token[:])
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		d.Cancelled, d.Units, d.RevokedAPIKeys, d.NarrowedAPIKeys = nil, 0, nil, nil
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE name = ? AND key_id <> 0)`, p.Name).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return store.ErrNotFound
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO accounts (`+accountColumns+`) VALUES (?, ?, ?, x'', ?)
ON CONFLICT (name) DO NOTHING`, d.Tombstone, token[:], store.TombstoneKeyID, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("its tombstone %q: %w", d.Tombstone, store.ErrExists)
		}
		rows, err := tx.QueryContext(ctx, `UPDATE work
SET state = 'cancelled', reason = ?, finished_at = ?
WHERE account = ? AND state IN ('queued', 'claimed')
RETURNING `+workColumns, p.Reason, now, p.Name)
		if err != nil {
			return err
		}
		for rows.Next() {
			w, err := scanWork(rows)
			if err != nil {
				rows.Close()
				return err
			}
			d.Cancelled = append(d.Cancelled, w)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		slices.SortFunc(d.Cancelled, func(a, b store.Work) int { return a.QueuedAt.Compare(b.QueuedAt) })
		for i := range d.Cancelled {
			w := &d.Cancelled[i]
			w.Account = d.Tombstone
			if p.Audit != nil {
				if _, err := insertAudit(ctx, tx, p.Audit.ForWork(*w)); err != nil {
					return err
				}
			}
		}
		res, err = tx.ExecContext(ctx, `UPDATE work SET account = ? WHERE account = ?`, d.Tombstone, p.Name)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		d.Units = int(n)
		// The keys are overwritten before their rows go, so that their
		// bytes do not linger in the pages' free space.
		for _, q := range []string{
			`DELETE FROM instances WHERE account = ?`,
			`DELETE FROM account_tokens WHERE account = ?`,
			`UPDATE account_keys SET sealed_key = zeroblob(length(sealed_key)) WHERE account = ?`,
			`DELETE FROM account_keys WHERE account = ?`,
			`UPDATE accounts SET sealed_key = zeroblob(length(sealed_key)) WHERE name = ?`,
			`DELETE FROM accounts WHERE name = ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, p.Name); err != nil {
				return err
			}
		}
		d.RevokedAPIKeys, d.NarrowedAPIKeys, err = unscopeAPIKeys(ctx, tx, p.Name, now)
		return err
	})
	if err != nil {
		return store.AccountDeletion{}, fmt.Errorf("deleting account %q: %w", p.Name, err)
	}
	return d, nil
}

// unscopeAPIKeys revokes the valid API keys that may use only account and
// takes it out of the scope of those that may use others too.
func unscopeAPIKeys(ctx context.Context, tx querier, account string, now int64) (revoked, narrowed []string, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, accounts FROM api_keys WHERE revoked_at = 0 AND accounts <> '' ORDER BY created_at, id`)
	if err != nil {
		return nil, nil, err
	}
	type scope struct {
		id       string
		accounts []string
	}
	var named []scope
	for rows.Next() {
		var id, enc string
		if err := rows.Scan(&id, &enc); err != nil {
			rows.Close()
			return nil, nil, err
		}
		var accounts []string
		if err := json.Unmarshal([]byte(enc), &accounts); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("api key %q: its accounts do not parse: %w", id, err)
		}
		if slices.Contains(accounts, account) {
			named = append(named, scope{id, slices.DeleteFunc(accounts, func(a string) bool { return a == account })})
		}
	}
	if err := rows.Close(); err != nil {
		return nil, nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	for _, k := range named {
		if len(k.accounts) == 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ?`, now, k.id); err != nil {
				return nil, nil, err
			}
			revoked = append(revoked, k.id)
			continue
		}
		enc, err := encodeAccounts(k.accounts)
		if err != nil {
			return nil, nil, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET accounts = ? WHERE id = ?`, enc, k.id); err != nil {
			return nil, nil, err
		}
		narrowed = append(narrowed, k.id)
	}
	return revoked, narrowed, nil
}

func (s *Store) AccountDeletions(ctx context.Context, since time.Time) ([]store.AccountDeletion, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT name, created_at FROM accounts WHERE key_id = 0 AND created_at >= ? ORDER BY created_at, name`, toNanos(since))
	if err != nil {
		return nil, fmt.Errorf("listing deleted accounts: %w", err)
	}
	defer rows.Close()
	var out []store.AccountDeletion
	for rows.Next() {
		var d store.AccountDeletion
		var at int64
		if err := rows.Scan(&d.Tombstone, &at); err != nil {
			return nil, fmt.Errorf("listing deleted accounts: %w", err)
		}
		name, ok := store.DeletedAccount(d.Tombstone)
		if !ok {
			continue
		}
		d.Name, d.DeletedAt = name, fromNanos(at)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing deleted accounts: %w", err)
	}
	return out, nil
}
