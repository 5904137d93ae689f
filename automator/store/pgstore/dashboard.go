package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) DashboardSessionEnd(ctx context.Context, p store.DashboardSessionEndParams) error {
	var err error
	if p.Audit == nil {
		_, err = s.sentExec(ctx, `INSERT INTO dashboard_sessions_ended (id, expires_at) VALUES ($1, $2)
ON CONFLICT (id) DO NOTHING`, p.ID, p.Expires)
	} else {
		err = s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO dashboard_sessions_ended (id, expires_at) VALUES ($1, $2)
ON CONFLICT (id) DO NOTHING`, p.ID, p.Expires)
			if err != nil {
				return err
			}
			// Ended already: nothing changed, so nothing to record.
			if tag.RowsAffected() == 0 {
				return nil
			}
			return appendAudit(ctx, tx, p.Audit)
		})
	}
	if err != nil {
		// Never print the id: it names a session.
		return fmt.Errorf("recording a dashboard sign-out: %w", err)
	}
	return nil
}

func (s *Store) DashboardSessionEnded(ctx context.Context, id string) (bool, error) {
	var one int
	err := s.pool.QueryRow(ctx, `SELECT 1 FROM dashboard_sessions_ended WHERE id = $1`, id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking for a dashboard sign-out: %w", err)
	}
	return true, nil
}

func (s *Store) DashboardSessionPurge(ctx context.Context, p store.DashboardSessionPurgeParams) (int, error) {
	tag, err := s.sentExec(ctx, `DELETE FROM dashboard_sessions_ended WHERE expires_at < $1`, p.ExpiredBefore)
	if err != nil {
		return 0, fmt.Errorf("deleting the sign-outs of dashboard sessions expired before %s: %w", p.ExpiredBefore.Format(time.RFC3339), err)
	}
	return int(tag.RowsAffected()), nil
}

func (s *Store) DashboardSessionEndList(ctx context.Context, expiresAfter time.Time) ([]store.DashboardSessionEndParams, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, expires_at FROM dashboard_sessions_ended WHERE expires_at > $1 ORDER BY expires_at, id`, expiresAfter)
	if err != nil {
		return nil, fmt.Errorf("listing dashboard sign-outs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.DashboardSessionEndParams, error) {
		var e store.DashboardSessionEndParams
		err := r.Scan(&e.ID, &e.Expires)
		e.Expires = e.Expires.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing dashboard sign-outs: %w", err)
	}
	return out, nil
}
