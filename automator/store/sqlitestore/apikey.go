package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) APIKeyCreate(ctx context.Context, p store.APIKeyCreateParams) (store.APIKey, error) {
	res, err := s.write.ExecContext(ctx, `INSERT INTO api_keys (id, hash, name, created_at) VALUES (?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING`,
		p.ID, nonNil(p.Hash), p.Name, toNanos(p.Now))
	if err != nil {
		return store.APIKey{}, fmt.Errorf("creating api key %q: %w", p.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.APIKey{}, fmt.Errorf("creating api key %q: %w", p.ID, err)
	} else if n == 0 {
		return store.APIKey{}, fmt.Errorf("creating api key %q: %w", p.ID, store.ErrExists)
	}
	return store.APIKey{ID: p.ID, Hash: p.Hash, Name: p.Name, CreatedAt: fromNanos(toNanos(p.Now))}, nil
}

func (s *Store) APIKeyGetByHash(ctx context.Context, h []byte) (store.APIKey, error) {
	var k store.APIKey
	var createdAt int64
	err := s.read.QueryRowContext(ctx, `SELECT id, hash, name, created_at FROM api_keys WHERE hash = ?`, nonNil(h)).
		Scan(&k.ID, &k.Hash, &k.Name, &createdAt)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		// Never print the hash: it identifies a credential.
		return store.APIKey{}, fmt.Errorf("getting api key by hash: %w", err)
	}
	k.CreatedAt = fromNanos(createdAt)
	return k, nil
}
