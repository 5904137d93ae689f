package pgstore

import (
	"context"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) Ping(ctx context.Context) error {
	var version int
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&version)
	if err != nil {
		return fmt.Errorf("pinging postgres store %s: %w", s.redacted, err)
	}
	// A schema ahead of this binary is one a newer replica migrated during
	// a rolling upgrade: migrations only add, so this one keeps serving.
	if want := migrations[len(migrations)-1].version; version < want {
		return fmt.Errorf("postgres store %s: %w", s.redacted, &store.SchemaBehindError{Version: version, Want: want})
	}
	return nil
}
