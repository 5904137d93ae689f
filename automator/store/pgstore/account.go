package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

const accountColumns = `name, token_hash, key_id, sealed_key, created_at`

func scanAccount(r pgx.Row) (store.Account, error) {
	var a store.Account
	if err := r.Scan(&a.Name, &a.TokenHash, &a.KeyID, &a.SealedKey, &a.CreatedAt); err != nil {
		return store.Account{}, err
	}
	a.CreatedAt = a.CreatedAt.UTC()
	return a, nil
}

func (s *Store) AccountCreate(ctx context.Context, p store.AccountCreateParams) (store.Account, error) {
	if p.KeyID == store.TombstoneKeyID {
		return store.Account{}, fmt.Errorf("creating account %q: key id %d is a deleted account's", p.Name, p.KeyID)
	}
	var a store.Account
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		a, err = scanAccount(tx.QueryRow(ctx, `INSERT INTO accounts (`+accountColumns+`) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO NOTHING
RETURNING `+accountColumns,
			p.Name, nonNil(p.TokenHash), p.KeyID, nonNil(p.SealedKey), p.Now))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrExists
		}
		if err != nil {
			return err
		}
		return appendAudit(ctx, tx, p.Audit)
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("creating account %q: %w", p.Name, err)
	}
	return a, nil
}

func (s *Store) AccountGet(ctx context.Context, name string) (store.Account, error) {
	if !store.Text(name) {
		return store.Account{}, fmt.Errorf("getting account %q: %w", name, store.ErrNotFound)
	}
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE name = $1 AND key_id <> 0`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Account{}, fmt.Errorf("getting account %q: %w", name, err)
	}
	return a, nil
}

func (s *Store) AccountGetByTokenHash(ctx context.Context, h []byte) (store.Account, error) {
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE token_hash = $1 AND key_id <> 0`, nonNil(h)))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		// Never print the hash: it identifies a credential.
		return store.Account{}, fmt.Errorf("getting account by token: %w", err)
	}
	return a, nil
}

func (s *Store) AccountList(ctx context.Context) ([]store.Account, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+accountColumns+` FROM accounts WHERE key_id <> 0 ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing accounts: %w", err)
	}
	out, err := pgx.CollectRows(rows, rowTo(scanAccount))
	if err != nil {
		return nil, fmt.Errorf("listing accounts: %w", err)
	}
	return out, nil
}
