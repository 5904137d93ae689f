package cli

import (
	"context"
	"fmt"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// openStore opens the database named by the settings: a postgres:// or
// postgresql:// URL is PostgreSQL (several automator replicas may share it),
// anything else a SQLite file (one automator). Every command caches
// credential lookups the same way (store.CachedCredentials), so a command
// that revokes or rotates returns only once no automator serves the old
// credential from its cache.
func openStore(ctx context.Context, dir string, cfg config.Config) (store.Store, error) {
	if pgstore.IsDSN(cfg.DB) {
		st, err := pgstore.Open(ctx, cfg.DB)
		if err != nil {
			return nil, fmt.Errorf("db: %w", err)
		}
		return store.CachedCredentials(st, store.CredentialTTL), nil
	}
	st, err := sqlitestore.Open(ctx, cfg.DBPath(dir))
	if err != nil {
		return nil, err
	}
	return store.CachedCredentials(st, store.CredentialTTL), nil
}

// describeDB names the database for logs and messages, without a password.
func describeDB(dir string, cfg config.Config) string {
	if pgstore.IsDSN(cfg.DB) {
		return pgstore.Redact(cfg.DB)
	}
	return cfg.DBPath(dir)
}

// broadcasterFor returns what carries queue events between the replicas
// sharing st, or nil when st serves one automator only (SQLite).
func broadcasterFor(st store.Store) server.Broadcaster {
	if pg, ok := store.Uncached(st).(*pgstore.Store); ok {
		return pgBroadcaster{pg}
	}
	return nil
}

// batchesOf is what the store runs in shared batches, for /metrics; nil
// for a store without them.
func batchesOf(st store.Store) metrics.BatchSource {
	switch s := store.Uncached(st).(type) {
	case *sqlitestore.Store:
		return s.BatchStats
	case *pgstore.Store:
		return s.BatchStats
	}
	return nil
}

// pgBroadcaster is server.Broadcaster over PostgreSQL NOTIFY/LISTEN.
type pgBroadcaster struct{ s *pgstore.Store }

var eventKinds = map[server.EventKind]pgstore.EventKind{
	server.EventWorkQueued: pgstore.EventWorkQueued,
	server.EventWorkEnded:  pgstore.EventWorkEnded,
}

func (b pgBroadcaster) Publish(ctx context.Context, e server.Event) error {
	kind, ok := eventKinds[e.Kind]
	if !ok {
		return fmt.Errorf("publishing a queue event: unknown kind %d", e.Kind)
	}
	return b.s.Publish(ctx, pgstore.Event{Kind: kind, Account: e.Account, WorkID: e.WorkID, InstanceID: e.InstanceID})
}

func (b pgBroadcaster) Listen(ctx context.Context, fn func(server.Event)) error {
	return b.s.Listen(ctx, func(e pgstore.Event) {
		for k, pk := range eventKinds {
			if pk == e.Kind {
				fn(server.Event{Kind: k, Account: e.Account, WorkID: e.WorkID, InstanceID: e.InstanceID})
				return
			}
		}
	})
}
