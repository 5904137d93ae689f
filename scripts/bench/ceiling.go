//go:build linux

package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// rawSQLite makes a database with the product's schema and an account "raw"
// (through the store), then opens it as a plain database/sql pool of one
// connection with the store's pragmas. done closes it and removes it.
func (b *bench) rawSQLite(ctx context.Context, prefix string) (db *sql.DB, done func(), err error) {
	dir, err := os.MkdirTemp(b.tmp, prefix)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	path := filepath.Join(dir, "raw.db")
	st, err := sqlitestore.Open(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	_, err = st.AccountCreate(ctx, store.AccountCreateParams{
		Name: "raw", TokenHash: randomBytes(32), KeyID: 1, SealedKey: randomBytes(72), Now: time.Now(),
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, nil, err
	}
	q := url.Values{}
	for _, p := range []string{"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err = sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, nil, err
	}
	// One connection: every write of SQLite is serialised anyway, and
	// statements prepared on the pool stay prepared on it.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, func() { db.Close(); os.RemoveAll(dir) }, nil
}

// rawTx runs fn in one transaction of db and commits it when fn returns nil.
func rawTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// sqliteCeiling is a what-if, not a baseline of the product: the same
// durable cycle on the same schema and pragmas, but with prepared
// statements and batch units per transaction (a writer that commits the
// work of many callers at once, "group commit"). batch 1 shows what
// prepared statements alone would give; batch 64 what group commit at 64
// callers would give. It returns cycles per second of one writer.
func (b *bench) sqliteCeiling(ctx context.Context, batch int, dur time.Duration) (float64, error) {
	db, done, err := b.rawSQLite(ctx, "sqlite-ceiling-")
	if err != nil {
		return 0, err
	}
	defer done()
	prep := func(query string) (*sql.Stmt, error) { return db.PrepareContext(ctx, query) }
	enqueue, err := prep(`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline) VALUES (?, 'raw', 'queued', 1, ?, ?, ?)`)
	if err != nil {
		return 0, fmt.Errorf("the product's schema changed? %w", err)
	}
	claim, err := prep(`UPDATE work SET state = 'claimed', instance_id = 'raw', claim_id = 'c_' || id, claimed_at = ?
WHERE id IN (SELECT id FROM work WHERE account = 'raw' AND state = 'queued' AND deadline > ? ORDER BY queued_at, id LIMIT ?)
RETURNING id`)
	if err != nil {
		return 0, err
	}
	complete, err := prep(`UPDATE work SET state = 'succeeded', sealed_result = ?, finished_at = ?
WHERE id = ? AND state = 'claimed' AND claim_id = 'c_' || id AND deadline > ?`)
	if err != nil {
		return 0, err
	}
	cmd, result := randomBytes(80), randomBytes(200)
	inTx := func(fn func(tx *sql.Tx) error) error { return rawTx(ctx, db, fn) }
	n := 0
	start := time.Now()
	for time.Since(start) < dur {
		now := time.Now().UnixNano()
		if err := inTx(func(tx *sql.Tx) error {
			st := tx.Stmt(enqueue)
			for range batch {
				if _, err := st.ExecContext(ctx, randomID("w_"), cmd, now, now+int64(5*time.Minute)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return 0, err
		}
		var ids []string
		if err := inTx(func(tx *sql.Tx) error {
			rows, err := tx.Stmt(claim).QueryContext(ctx, now, now, batch)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return rows.Err()
		}); err != nil {
			return 0, err
		}
		if err := inTx(func(tx *sql.Tx) error {
			st := tx.Stmt(complete)
			for _, id := range ids {
				if _, err := st.ExecContext(ctx, result, now, id, now); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return 0, err
		}
		n += len(ids)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
