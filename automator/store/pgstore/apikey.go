package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

const apiKeyColumns = `id, hash, name, created_at, accounts, revoked_at`

func scanAPIKey(r pgx.Row) (store.APIKey, error) {
	var k store.APIKey
	var revokedAt *time.Time
	if err := r.Scan(&k.ID, &k.Hash, &k.Name, &k.CreatedAt, &k.Accounts, &revokedAt); err != nil {
		return store.APIKey{}, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	k.RevokedAt = fromNull(revokedAt)
	if len(k.Accounts) == 0 {
		k.Accounts = nil
	}
	return k, nil
}

// scanAPIKeyInto returns a scan function that reads the row into k.
func scanAPIKeyInto(k *store.APIKey) func(pgx.Row) error {
	return func(r pgx.Row) (err error) {
		*k, err = scanAPIKey(r)
		return err
	}
}

func (s *Store) APIKeyCreate(ctx context.Context, p store.APIKeyCreateParams) (store.APIKey, error) {
	accounts := store.DistinctAccounts(p.Accounts)
	if accounts == nil {
		accounts = []string{}
	}
	var k store.APIKey
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if len(accounts) > 0 {
			// FOR SHARE: an AccountDelete of one of them (FOR UPDATE)
			// waits for this key, and revokes or narrows it; or this
			// waits for the delete, and finds the account gone.
			rows, err := tx.Query(ctx, `SELECT name FROM accounts WHERE name = ANY ($1) AND key_id <> 0 ORDER BY name FOR SHARE`, accounts)
			if err != nil {
				return err
			}
			found, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, a := range accounts {
				if !slices.Contains(found, a) {
					return fmt.Errorf("account %q: %w", a, store.ErrNotFound)
				}
			}
		}
		err := scanAPIKeyInto(&k)(tx.QueryRow(ctx, `INSERT INTO api_keys (id, hash, name, created_at, accounts) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO NOTHING
RETURNING `+apiKeyColumns,
			p.ID, nonNil(p.Hash), p.Name, p.Now, accounts))
		if errors.Is(err, pgx.ErrNoRows) {
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
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = $1`, nonNil(h)))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		// Never print the hash: it identifies a credential.
		return store.APIKey{}, fmt.Errorf("getting api key by hash: %w", err)
	}
	return k, nil
}

func (s *Store) APIKeyList(ctx context.Context) ([]store.APIKey, error) {
	// The ids compare byte by byte, as in SQLite, whatever the database's
	// collation: unlike the names and ids of the other tables, the column
	// has the database's (TestConformanceUnderANaturalLanguageCollation).
	rows, err := s.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("listing api keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, rowTo(scanAPIKey))
	if err != nil {
		return nil, fmt.Errorf("listing api keys: %w", err)
	}
	return out, nil
}

func (s *Store) APIKeyRevoke(ctx context.Context, p store.APIKeyRevokeParams) (store.APIKey, error) {
	var k store.APIKey
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		err := scanAPIKeyInto(&k)(tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = $2
WHERE id = $1 AND revoked_at IS NULL
RETURNING `+apiKeyColumns, p.ID, p.Now))
		if errors.Is(err, pgx.ErrNoRows) {
			// Revoked already (it keeps its first revocation's time), or
			// no such key.
			err = scanAPIKeyInto(&k)(tx.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`, p.ID))
			if errors.Is(err, pgx.ErrNoRows) {
				return store.ErrNotFound
			}
			return err
		}
		if err != nil {
			return err
		}
		return appendAudit(ctx, tx, p.Audit)
	})
	if err != nil {
		return store.APIKey{}, fmt.Errorf("revoking api key %q: %w", p.ID, err)
	}
	return k, nil
}
