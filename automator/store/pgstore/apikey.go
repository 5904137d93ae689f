package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

func scanAPIKey(r pgx.Row) (store.APIKey, error) {
	var k store.APIKey
	if err := r.Scan(&k.ID, &k.Hash, &k.Name, &k.CreatedAt); err != nil {
		return store.APIKey{}, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	return k, nil
}

func (s *Store) APIKeyCreate(ctx context.Context, p store.APIKeyCreateParams) (store.APIKey, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `INSERT INTO api_keys (id, hash, name, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO NOTHING
RETURNING id, hash, name, created_at`,
		p.ID, nonNil(p.Hash), p.Name, p.Now))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrExists
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("creating api key %q: %w", p.ID, err)
	}
	return k, nil
}

func (s *Store) APIKeyGetByHash(ctx context.Context, h []byte) (store.APIKey, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `SELECT id, hash, name, created_at FROM api_keys WHERE hash = $1`, nonNil(h)))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		// Never print the hash: it identifies a credential.
		return store.APIKey{}, fmt.Errorf("getting api key by hash: %w", err)
	}
	return k, nil
}
