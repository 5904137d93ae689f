package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) DashboardSessionEnd(ctx context.Context, p store.DashboardSessionEndParams) error {
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO dashboard_sessions_ended (id, expires_at) VALUES (?, ?)
ON CONFLICT (id) DO NOTHING`, p.ID, toNanos(p.Expires))
		if err != nil {
			return err
		}
		// Ended already: nothing changed, so nothing to record.
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		return appendAudit(ctx, tx, p.Audit)
	})
	if err != nil {
		// Never print the id: it names a session.
		return fmt.Errorf("recording a dashboard sign-out: %w", err)
	}
	return nil
}

func (s *Store) DashboardSessionEnded(ctx context.Context, id string) (bool, error) {
	var one int
	err := s.reads.QueryRowContext(ctx, `SELECT 1 FROM dashboard_sessions_ended WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking for a dashboard sign-out: %w", err)
	}
	return true, nil
}

func (s *Store) DashboardSessionPurge(ctx context.Context, p store.DashboardSessionPurgeParams) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM dashboard_sessions_ended WHERE expires_at < ?`, toNanos(p.ExpiredBefore))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deleting the sign-outs of dashboard sessions expired before %s: %w", p.ExpiredBefore.Format(time.RFC3339), err)
	}
	return int(n), nil
}

func (s *Store) DashboardSessionEndList(ctx context.Context, expiresAfter time.Time) ([]store.DashboardSessionEndParams, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT id, expires_at FROM dashboard_sessions_ended WHERE expires_at > ? ORDER BY expires_at, id`, toNanos(expiresAfter))
	if err != nil {
		return nil, fmt.Errorf("listing dashboard sign-outs: %w", err)
	}
	defer rows.Close()
	var out []store.DashboardSessionEndParams
	for rows.Next() {
		var e store.DashboardSessionEndParams
		var at int64
		if err := rows.Scan(&e.ID, &at); err != nil {
			return nil, fmt.Errorf("listing dashboard sign-outs: %w", err)
		}
		e.Expires = fromNanos(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing dashboard sign-outs: %w", err)
	}
	return out, nil
}
