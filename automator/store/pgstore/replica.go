package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) ReplicaHeartbeat(ctx context.Context, p store.ReplicaHeartbeatParams) error {
	_, err := s.sentExec(ctx, `INSERT INTO replicas (replica_id, hostname, version, started_at, last_seen)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (replica_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	started_at = excluded.started_at,
	last_seen = excluded.last_seen`,
		p.ReplicaID, p.Hostname, p.Version, p.StartedAt, p.Now)
	if err != nil {
		return fmt.Errorf("recording a heartbeat of replica %q: %w", p.ReplicaID, err)
	}
	return nil
}

func (s *Store) ReplicaList(ctx context.Context) ([]store.Replica, error) {
	rows, err := s.pool.Query(ctx, `SELECT replica_id, hostname, version, started_at, last_seen
FROM replicas ORDER BY replica_id`)
	if err != nil {
		return nil, fmt.Errorf("listing replicas: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Replica, error) {
		var rep store.Replica
		err := r.Scan(&rep.ReplicaID, &rep.Hostname, &rep.Version, &rep.StartedAt, &rep.LastSeen)
		rep.StartedAt, rep.LastSeen = rep.StartedAt.UTC(), rep.LastSeen.UTC()
		return rep, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing replicas: %w", err)
	}
	return out, nil
}

func (s *Store) ReplicaPurge(ctx context.Context, p store.ReplicaPurgeParams) (int, error) {
	tag, err := s.sentExec(ctx, `DELETE FROM replicas WHERE last_seen < $1`, p.SeenBefore)
	if err != nil {
		return 0, fmt.Errorf("deleting the replicas not heard from since %s: %w", p.SeenBefore.Format(time.RFC3339), err)
	}
	return int(tag.RowsAffected()), nil
}

// DatabaseClock reads the database server's clock (clock_timestamp(): the
// time as the statement runs, not its transaction's start), in one round
// trip. Each replica compares it with its own (package server,
// clockoffset.go): with several replicas, a unit's deadline is the clock of
// the replica that queued it plus its timeout, and every replica's sweeper
// times units out by its own clock, so replicas whose clocks disagree time
// units out early or late. SQLite has no such method: its database runs on
// the automator's own clock.
func (s *Store) DatabaseClock(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("reading the database server's clock: %w", err)
	}
	return t, nil
}
