package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

const apiKeyColumns = `id, hash, name, created_at, accounts, revoked_at`

func scanAPIKey(r interface{ Scan(...any) error }) (store.APIKey, error) {
	var k store.APIKey
	var createdAt, revokedAt int64
	var accounts string
	if err := r.Scan(&k.ID, &k.Hash, &k.Name, &createdAt, &accounts, &revokedAt); err != nil {
		return store.APIKey{}, err
	}
	k.CreatedAt = fromNanos(createdAt)
	k.RevokedAt = fromNanos(revokedAt)
	if accounts != "" {
		if err := json.Unmarshal([]byte(accounts), &k.Accounts); err != nil {
			return store.APIKey{}, fmt.Errorf("api key %q: its accounts do not parse: %w", k.ID, err)
		}
	}
	return k, nil
}

// encodeAccounts stores a scope as a JSON array; "" is every account.
func encodeAccounts(accounts []string) (string, error) {
	if len(accounts) == 0 {
		return "", nil
	}
	b, err := json.Marshal(accounts)
	return string(b), err
}

func (s *Store) APIKeyCreate(ctx context.Context, p store.APIKeyCreateParams) (store.APIKey, error) {
	accounts, err := encodeAccounts(store.DistinctAccounts(p.Accounts))
	if err != nil {
		return store.APIKey{}, fmt.Errorf("creating api key %q: %w", p.ID, err)
	}
	var k store.APIKey
	err = s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		for _, a := range p.Accounts {
			var exists bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE name = ? AND key_id <> 0)`, a).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("account %q: %w", a, store.ErrNotFound)
			}
		}
		var err error
		k, err = scanAPIKey(tx.QueryRowContext(ctx, `INSERT INTO api_keys (id, hash, name, created_at, accounts) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING
RETURNING `+apiKeyColumns,
			p.ID, nonNil(p.Hash), p.Name, toNanos(p.Now), accounts))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrExists
		}
		if err != nil {
			return err
		}
		return appendAudit(ctx, tx, p.Audit)
	})
	if err != nil {
		return store.APIKey{}, fmt.Errorf("creating api key %q: %w", p.ID, err)
	}
	return k, nil
}

func (s *Store) APIKeyGetByHash(ctx context.Context, h []byte) (store.APIKey, error) {
	k, err := scanAPIKey(s.reads.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = ?`, nonNil(h)))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		// Never print the hash: it identifies a credential.
		return store.APIKey{}, fmt.Errorf("getting api key by hash: %w", err)
	}
	return k, nil
}

func (s *Store) APIKeyList(ctx context.Context) ([]store.APIKey, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing api keys: %w", err)
	}
	defer rows.Close()
	var out []store.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("listing api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing api keys: %w", err)
	}
	return out, nil
}

func (s *Store) APIKeyRevoke(ctx context.Context, p store.APIKeyRevokeParams) (store.APIKey, error) {
	var k store.APIKey
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at = 0`, toNanos(p.Now), p.ID)
		if err != nil {
			return err
		}
		k, err = scanAPIKey(tx.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, p.ID))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // revoked already
		}
		return appendAudit(ctx, tx, p.Audit)
	})
	if err != nil {
		return store.APIKey{}, fmt.Errorf("revoking api key %q: %w", p.ID, err)
	}
	return k, nil
}
