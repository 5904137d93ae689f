package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

const accountColumns = `name, token_hash, key_id, sealed_key, created_at`

func scanAccount(r interface{ Scan(...any) error }) (store.Account, error) {
	var a store.Account
	var createdAt int64
	if err := r.Scan(&a.Name, &a.TokenHash, &a.KeyID, &a.SealedKey, &createdAt); err != nil {
		return store.Account{}, err
	}
	a.CreatedAt = fromNanos(createdAt)
	return a, nil
}

func (s *Store) AccountCreate(ctx context.Context, p store.AccountCreateParams) (store.Account, error) {
	if p.KeyID == store.TombstoneKeyID {
		return store.Account{}, fmt.Errorf("creating account %q: key id %d is a deleted account's", p.Name, p.KeyID)
	}
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO accounts (`+accountColumns+`) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (name) DO NOTHING`,
			p.Name, nonNil(p.TokenHash), p.KeyID, nonNil(p.SealedKey), toNanos(p.Now))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			return appendAudit(ctx, tx, p.Audit)
		}
		var moving bool
		if err := tx.QueryRowContext(ctx, `SELECT moving_to <> '' FROM accounts WHERE name = ?`, p.Name).Scan(&moving); err != nil {
			return err
		}
		if moving {
			return store.ErrBeingDeleted
		}
		return store.ErrExists
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("creating account %q: %w", p.Name, err)
	}
	return store.Account{
		Name:      p.Name,
		TokenHash: p.TokenHash,
		KeyID:     p.KeyID,
		SealedKey: p.SealedKey,
		CreatedAt: fromNanos(toNanos(p.Now)),
	}, nil
}

func (s *Store) AccountGet(ctx context.Context, name string) (store.Account, error) {
	a, err := scanAccount(s.reads.QueryRowContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE name = ? AND key_id <> 0`, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Account{}, fmt.Errorf("getting account %q: %w", name, err)
	}
	return a, nil
}

func (s *Store) AccountGetByTokenHash(ctx context.Context, h []byte) (store.Account, error) {
	a, err := scanAccount(s.reads.QueryRowContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE token_hash = ? AND key_id <> 0`, nonNil(h)))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		// Never print the hash: it identifies a credential.
		return store.Account{}, fmt.Errorf("getting account by token: %w", err)
	}
	return a, nil
}

func (s *Store) AccountList(ctx context.Context) ([]store.Account, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE key_id <> 0 ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing accounts: %w", err)
	}
	defer rows.Close()
	var out []store.Account
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("listing accounts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing accounts: %w", err)
	}
	return out, nil
}
