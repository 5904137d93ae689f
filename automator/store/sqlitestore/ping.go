package sqlitestore

import (
	"context"
	"fmt"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) Ping(ctx context.Context) error {
	var version int
	err := s.reads.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&version)
	if err != nil {
		return fmt.Errorf("pinging sqlite store %q: %w", s.path, err)
	}
	// A schema ahead of this binary is one a newer replica migrated during
	// a rolling upgrade: migrations only add, so this one keeps serving.
	if want := migrations[len(migrations)-1].version; version < want {
		return fmt.Errorf("sqlite store %q: %w", s.path, &store.SchemaBehindError{Version: version, Want: want})
	}
	return nil
}
