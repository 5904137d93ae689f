package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) ReplicaHeartbeat(ctx context.Context, p store.ReplicaHeartbeatParams) error {
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO replicas (replica_id, hostname, version, started_at, last_seen)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (replica_id) DO UPDATE SET
	hostname = excluded.hostname,
	version = excluded.version,
	started_at = excluded.started_at,
	last_seen = excluded.last_seen`,
			p.ReplicaID, p.Hostname, p.Version, toNanos(p.StartedAt), toNanos(p.Now))
		return err
	})
	if err != nil {
		return fmt.Errorf("recording a heartbeat of replica %q: %w", p.ReplicaID, err)
	}
	return nil
}

func (s *Store) ReplicaList(ctx context.Context) ([]store.Replica, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT replica_id, hostname, version, started_at, last_seen
FROM replicas ORDER BY replica_id`)
	if err != nil {
		return nil, fmt.Errorf("listing replicas: %w", err)
	}
	defer rows.Close()
	var out []store.Replica
	for rows.Next() {
		var r store.Replica
		var startedAt, lastSeen int64
		if err := rows.Scan(&r.ReplicaID, &r.Hostname, &r.Version, &startedAt, &lastSeen); err != nil {
			return nil, fmt.Errorf("listing replicas: %w", err)
		}
		r.StartedAt, r.LastSeen = fromNanos(startedAt), fromNanos(lastSeen)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing replicas: %w", err)
	}
	return out, nil
}

func (s *Store) ReplicaPurge(ctx context.Context, p store.ReplicaPurgeParams) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM replicas WHERE last_seen < ?`, toNanos(p.SeenBefore))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deleting the replicas not heard from since %s: %w", p.SeenBefore.Format(time.RFC3339), err)
	}
	return int(n), nil
}
