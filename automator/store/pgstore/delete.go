package pgstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
)

func (s *Store) AccountDelete(ctx context.Context, p store.AccountDeleteParams) (store.AccountDeletion, error) {
	if p.Resume {
		// Nothing to finish: a deletion moves every unit in its own
		// transaction.
		return store.AccountDeletion{}, fmt.Errorf("deleting account %q: %w", p.Name, store.ErrNotFound)
	}
	d := store.AccountDeletion{Name: p.Name, Tombstone: store.DeletedAccountName(p.Name, p.Now)}
	// The tombstone's token is random: nobody holds it, and no lookup of
	// a token returns a tombstone anyway.
	var token [32]byte
	rand.Read(token[:])
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		d.Cancelled, d.Units, d.RevokedAPIKeys, d.NarrowedAPIKeys = nil, 0, nil, nil
		// FOR UPDATE: a rotation or deletion of the account waits for
		// this one, and so do the foreign key checks of units and polls
		// being stored for it (they then find it gone).
		var found bool
		err := tx.QueryRow(ctx, `SELECT true FROM accounts WHERE name = $1 AND key_id <> 0 FOR UPDATE`, p.Name).Scan(&found)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `INSERT INTO accounts (`+accountColumns+`) VALUES ($1, $2, $3, '', $4)
ON CONFLICT (name) DO NOTHING
RETURNING created_at`, d.Tombstone, token[:], store.TombstoneKeyID, p.Now).Scan(&d.DeletedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("its tombstone %q: %w", d.Tombstone, store.ErrExists)
		}
		if err != nil {
			return err
		}
		d.DeletedAt = d.DeletedAt.UTC()
		rows, err := tx.Query(ctx, withAudit(`UPDATE work
SET state = 'cancelled', reason = $1, finished_at = $2, account = $4
WHERE account = $3 AND state IN ('queued', 'claimed')
RETURNING `+workColumns, p.Audit != nil, 5),
			appendAuditArgs([]any{p.Reason, p.Now, p.Name, d.Tombstone}, p.Audit)...)
		if err != nil {
			return err
		}
		if d.Cancelled, err = pgx.CollectRows(rows, rowTo(scanWork)); err != nil {
			return err
		}
		slices.SortFunc(d.Cancelled, func(a, b store.Work) int { return a.QueuedAt.Compare(b.QueuedAt) })
		tag, err := tx.Exec(ctx, `UPDATE work SET account = $2 WHERE account = $1`, p.Name, d.Tombstone)
		if err != nil {
			return err
		}
		d.Units = len(d.Cancelled) + int(tag.RowsAffected())
		for _, q := range []string{
			`DELETE FROM instances WHERE account = $1`,
			`DELETE FROM account_tokens WHERE account = $1`,
			`DELETE FROM account_keys WHERE account = $1`,
			`DELETE FROM accounts WHERE name = $1`,
		} {
			if _, err := tx.Exec(ctx, q, p.Name); err != nil {
				return err
			}
		}
		// Every copy of the name counts: a key that named it twice (as
		// APIKeyCreate let it before DistinctAccounts) has nothing else,
		// and the narrowing below would leave it an empty scope, which is
		// every account.
		rows, err = tx.Query(ctx, `UPDATE api_keys SET revoked_at = $2
WHERE revoked_at IS NULL AND $1::text = ANY (accounts) AND cardinality(array_remove(accounts, $1::text)) = 0
RETURNING id`, p.Name, p.Now)
		if err != nil {
			return err
		}
		if d.RevokedAPIKeys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `UPDATE api_keys SET accounts = array_remove(accounts, $1::text)
WHERE revoked_at IS NULL AND $1::text = ANY (accounts)
RETURNING id`, p.Name)
		if err != nil {
			return err
		}
		if d.NarrowedAPIKeys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		slices.Sort(d.RevokedAPIKeys)
		slices.Sort(d.NarrowedAPIKeys)
		if p.AuditDeletion != nil {
			for _, e := range p.AuditDeletion(d) {
				if _, err := insertAudit(ctx, tx, e); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return store.AccountDeletion{}, fmt.Errorf("deleting account %q: %w", p.Name, err)
	}
	return d, nil
}

func (s *Store) AccountDeletions(ctx context.Context, since time.Time) ([]store.AccountDeletion, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, created_at FROM accounts WHERE key_id = 0 AND created_at >= $1 ORDER BY created_at, name`, since)
	if err != nil {
		return nil, fmt.Errorf("listing deleted accounts: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AccountDeletion, error) {
		var d store.AccountDeletion
		err := r.Scan(&d.Tombstone, &d.DeletedAt)
		d.DeletedAt = d.DeletedAt.UTC()
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing deleted accounts: %w", err)
	}
	out := all[:0]
	for _, d := range all {
		if name, ok := store.DeletedAccount(d.Tombstone); ok {
			d.Name = name
			out = append(out, d)
		}
	}
	return out, nil
}

// AccountsBeingDeleted: none. AccountDelete moves every unit of the
// account in the transaction that deletes it.
func (s *Store) AccountsBeingDeleted(ctx context.Context) ([]store.AccountDeletion, error) {
	return nil, nil
}
