package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// Reach tells whether this process can reach the database now: on a
// connection of its own, set up for the purpose and closed after, not one
// of the pool's, which may all be busy (waiting on a lock, say) while the
// database answers. For a replica to tell a database out of reach from
// a busy one (automator/cli's sendAway). PostgreSQL refusing the
// connection with an error of its own (too many clients, say) is reached.
func (s *Store) Reach(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	var answered *pgconn.PgError
	if errors.As(err, &answered) {
		// PostgreSQL answered, refusing the connection (too many
		// clients, starting up or shutting down, …): reached, and as
		// it refuses this replica, it refuses the others.
		return nil
	}
	if err != nil {
		return fmt.Errorf("connecting to postgres store %s: %w", s.redacted, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if err := conn.Ping(ctx); err != nil {
		return fmt.Errorf("pinging postgres store %s: %w", s.redacted, err)
	}
	return nil
}
