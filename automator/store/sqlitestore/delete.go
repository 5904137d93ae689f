package sqlitestore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/ctxtime"
)

// moveBatch is how many units of a deleted account one write moves to its
// tombstone. SQLite rewrites the whole record of a unit to change its
// account, sealed blobs included: about 0.2 ms a unit of 2 KiB on a
// database of a million, so a batch holds the single writer for about
// 20 ms. Moving all of a long history in one transaction held it for
// minutes (200,000 units: 44 s), and the writes of callers and proxies
// failed meanwhile ("database is locked").
const moveBatch = 100

func (s *Store) AccountDelete(ctx context.Context, p store.AccountDeleteParams) (store.AccountDeletion, error) {
	now := toNanos(p.Now)
	d := store.AccountDeletion{Name: p.Name, Tombstone: store.DeletedAccountName(p.Name, p.Now), DeletedAt: fromNanos(now)}
	// The tombstone's token is random: nobody holds it, and no lookup of
	// a token returns a tombstone anyway. So is the one the account's row
	// keeps while its units move.
	var token, keptToken [32]byte
	rand.Read(token[:])
	rand.Read(keptToken[:])
	var done bool
	var left int // the ended units to move
	err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		d = store.AccountDeletion{Name: p.Name, Tombstone: d.Tombstone, DeletedAt: d.DeletedAt}
		var keyID uint32
		var movingTo string
		err := tx.QueryRowContext(ctx, `SELECT key_id, moving_to FROM accounts WHERE name = ?`, p.Name).Scan(&keyID, &movingTo)
		switch {
		case errors.Is(err, sql.ErrNoRows) || err == nil && keyID == store.TombstoneKeyID && movingTo == "":
			return store.ErrNotFound
		case err != nil:
			return err
		case keyID == store.TombstoneKeyID:
			// Deleted already, by a call that stopped before it moved
			// every unit: move the rest, and nothing else.
			var deletedAt int64
			if err := tx.QueryRowContext(ctx, `SELECT created_at FROM accounts WHERE name = ?`, movingTo).Scan(&deletedAt); err != nil {
				return fmt.Errorf("its tombstone %q: %w", movingTo, err)
			}
			d.Tombstone, d.DeletedAt, d.Resumed = movingTo, fromNanos(deletedAt), true
			return tx.QueryRowContext(ctx, `SELECT count(*) FROM work WHERE account = ?`, p.Name).Scan(&left)
		case p.Resume:
			return store.ErrNotFound
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO accounts (`+accountColumns+`) VALUES (?, ?, ?, x'', ?)
ON CONFLICT (name) DO NOTHING`, d.Tombstone, token[:], store.TombstoneKeyID, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("its tombstone %q: %w", d.Tombstone, store.ErrExists)
		}
		rows, err := tx.QueryContext(ctx, `UPDATE work
SET state = 'cancelled', reason = ?, finished_at = ?, account = ?
WHERE account = ? AND state IN ('queued', 'claimed')
RETURNING `+workColumns, p.Reason, now, d.Tombstone, p.Name)
		if err != nil {
			return err
		}
		for rows.Next() {
			w, err := scanWork(rows)
			if err != nil {
				rows.Close()
				return err
			}
			d.Cancelled = append(d.Cancelled, w)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		slices.SortFunc(d.Cancelled, func(a, b store.Work) int { return a.QueuedAt.Compare(b.QueuedAt) })
		if p.Audit != nil {
			for _, w := range d.Cancelled {
				if _, err := insertAudit(ctx, tx, p.Audit.ForWork(w)); err != nil {
					return err
				}
			}
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM work WHERE account = ?`, p.Name).Scan(&left); err != nil {
			return err
		}
		d.Units = len(d.Cancelled) + left
		// The keys are overwritten before their rows go, so that their
		// bytes do not linger in the pages' free space. The account's
		// own row stays, with key id 0, as long as units of it are left
		// to move: it keeps its name taken, and tells the reads which
		// tombstone to show them under (shownAccount).
		for _, q := range []string{
			`DELETE FROM instances WHERE account = ?`,
			`DELETE FROM account_tokens WHERE account = ?`,
			`UPDATE account_keys SET sealed_key = zeroblob(length(sealed_key)) WHERE account = ?`,
			`DELETE FROM account_keys WHERE account = ?`,
			`UPDATE accounts SET sealed_key = zeroblob(length(sealed_key)) WHERE name = ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, p.Name); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET token_hash = ?, key_id = ?, sealed_key = x'', moving_to = ? WHERE name = ?`,
			keptToken[:], store.TombstoneKeyID, d.Tombstone, p.Name); err != nil {
			return err
		}
		if d.RevokedAPIKeys, d.NarrowedAPIKeys, err = unscopeAPIKeys(ctx, tx, p.Name, now); err != nil {
			return err
		}
		if p.AuditDeletion != nil {
			for _, e := range p.AuditDeletion(d) {
				if _, err := insertAudit(ctx, tx, e); err != nil {
					return err
				}
			}
		}
		if left <= moveBatch {
			_, _, err = moveUnits(ctx, tx, p.Name, d.Tombstone, &done)
		}
		return err
	})
	if err != nil {
		return store.AccountDeletion{}, fmt.Errorf("deleting account %q: %w", p.Name, err)
	}
	if !done && p.Moving != nil {
		p.Moving(d, left)
	}
	moved := 0
	for !done {
		start := time.Now()
		var n int
		var fin bool
		err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
			fin = false
			var freed bool
			var err error
			if n, freed, err = moveUnits(ctx, tx, p.Name, d.Tombstone, &fin); err != nil || !freed || !d.Resumed || p.AuditFinished == nil {
				return err
			}
			// This call finishes a deletion left unfinished: it says so
			// in the transaction that frees the name.
			f := d
			f.Units = moved + n
			for _, e := range p.AuditFinished(f) {
				if _, err := insertAudit(ctx, tx, e); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			moved, done = moved+n, fin
		}
		if err == nil && s.movedBatch != nil {
			s.movedBatch()
		}
		// Other writes commit between two batches, not behind the next.
		if err == nil && !done && !ctxtime.Sleep(ctx, time.Since(start)) {
			err = ctx.Err()
		}
		if err != nil {
			return d, fmt.Errorf("deleting account %q: %w: %w", p.Name, store.ErrDeletionUnfinished, err)
		}
	}
	if d.Resumed {
		d.Units = moved
	}
	return d, nil
}

// moveUnits moves up to moveBatch units of account name, being deleted, to
// its tombstone, and returns how many it moved. Once none is left, it
// deletes the account's row, which frees its name, sets *done and returns
// freed.
//
// Another call may be moving the same account's units (a command and the
// serving automator, each finishing an unfinished deletion): each batch
// moves units still of the account, so none moves twice. One that finds
// the account's row gone, or no longer being deleted to tombstone, sets
// *done and moves nothing: the other call finished the deletion, and the
// name may be a new account's since, whose units are not to move.
func moveUnits(ctx context.Context, tx querier, name, tombstone string, done *bool) (moved int, freed bool, err error) {
	var movingTo string
	err = tx.QueryRowContext(ctx, `SELECT moving_to FROM accounts WHERE name = ?`, name).Scan(&movingTo)
	if errors.Is(err, sql.ErrNoRows) || err == nil && movingTo != tombstone {
		*done = true
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	res, err := tx.ExecContext(ctx, `UPDATE work SET account = ? WHERE id IN (SELECT id FROM work WHERE account = ? LIMIT ?)`,
		tombstone, name, moveBatch)
	if err != nil {
		return 0, false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == moveBatch {
		return int(n), false, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM accounts WHERE name = ? AND moving_to = ?`, name, tombstone); err != nil {
		return int(n), false, err
	}
	*done = true
	return int(n), true, nil
}

// unscopeAPIKeys revokes the valid API keys that may use only account and
// takes it out of the scope of those that may use others too.
func unscopeAPIKeys(ctx context.Context, tx querier, account string, now int64) (revoked, narrowed []string, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, accounts FROM api_keys WHERE revoked_at = 0 AND accounts <> '' ORDER BY created_at, id`)
	if err != nil {
		return nil, nil, err
	}
	type scope struct {
		id       string
		accounts []string
	}
	var named []scope
	for rows.Next() {
		var id, enc string
		if err := rows.Scan(&id, &enc); err != nil {
			rows.Close()
			return nil, nil, err
		}
		var accounts []string
		if err := json.Unmarshal([]byte(enc), &accounts); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("api key %q: its accounts do not parse: %w", id, err)
		}
		if slices.Contains(accounts, account) {
			named = append(named, scope{id, slices.DeleteFunc(accounts, func(a string) bool { return a == account })})
		}
	}
	if err := rows.Close(); err != nil {
		return nil, nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	for _, k := range named {
		if len(k.accounts) == 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ?`, now, k.id); err != nil {
				return nil, nil, err
			}
			revoked = append(revoked, k.id)
			continue
		}
		enc, err := encodeAccounts(k.accounts)
		if err != nil {
			return nil, nil, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET accounts = ? WHERE id = ?`, enc, k.id); err != nil {
			return nil, nil, err
		}
		narrowed = append(narrowed, k.id)
	}
	return revoked, narrowed, nil
}

func (s *Store) AccountDeletions(ctx context.Context, since time.Time) ([]store.AccountDeletion, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT name, created_at FROM accounts WHERE key_id = 0 AND created_at >= ? ORDER BY created_at, name`, toNanos(since))
	if err != nil {
		return nil, fmt.Errorf("listing deleted accounts: %w", err)
	}
	defer rows.Close()
	var out []store.AccountDeletion
	for rows.Next() {
		var d store.AccountDeletion
		var at int64
		if err := rows.Scan(&d.Tombstone, &at); err != nil {
			return nil, fmt.Errorf("listing deleted accounts: %w", err)
		}
		name, ok := store.DeletedAccount(d.Tombstone)
		if !ok {
			continue
		}
		d.Name, d.DeletedAt = name, fromNanos(at)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing deleted accounts: %w", err)
	}
	return out, nil
}

func (s *Store) AccountsBeingDeleted(ctx context.Context) ([]store.AccountDeletion, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT a.name, a.moving_to, COALESCE(t.created_at, 0),
(SELECT count(*) FROM work WHERE work.account = a.name)
FROM accounts a LEFT JOIN accounts t ON t.name = a.moving_to
WHERE a.moving_to <> '' ORDER BY a.name`)
	if err != nil {
		return nil, fmt.Errorf("listing the accounts being deleted: %w", err)
	}
	defer rows.Close()
	var out []store.AccountDeletion
	for rows.Next() {
		var d store.AccountDeletion
		var at int64
		if err := rows.Scan(&d.Name, &d.Tombstone, &at, &d.Units); err != nil {
			return nil, fmt.Errorf("listing the accounts being deleted: %w", err)
		}
		d.DeletedAt = fromNanos(at)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the accounts being deleted: %w", err)
	}
	return out, nil
}
