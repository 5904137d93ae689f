package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// cmdAccountDelete is `account delete`: it removes an account for good,
// without asking (like `apikey revoke`). Its token and key stop working on
// every automator before the command returns; its queued and claimed
// units end as cancelled; its key is destroyed, so no command or result
// of its units can be read again; the API keys that could use only it are
// revoked. Its units stay listed, under "NAME (deleted TIME)", until the
// normal purge. A running automator learns of the deletion from the store
// (server/deleted.go).
func cmdAccountDelete(ctx context.Context, args []string, env Env) error {
	fs := newFlags("account delete", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	name, err := accountArgs(fs, args, dir, "usage: automator account delete NAME --data-dir DIR [--db DSN]")
	if err != nil {
		return err
	}
	d, err := openAccountAdmin(ctx, *dir, *db)
	if err != nil {
		return err
	}
	defer d.st.Close()
	st := d.st

	// The deletion forgets them.
	seen, seenErr := st.InstanceList(ctx, name)
	now := time.Now()
	reason := fmt.Sprintf("account %q was deleted", name)
	del, err := st.AccountDelete(ctx, store.AccountDeleteParams{
		Name:   name,
		Reason: reason,
		Now:    now,
		Audit:  cliEvent(store.AuditEvent{At: now, Kind: store.AuditWorkEnded, Detail: reason}),
		AuditDeletion: func(d store.AccountDeletion) []store.AuditEvent {
			events := []store.AuditEvent{*cliEvent(store.AuditEvent{At: now, Kind: store.AuditAccountDeleted, Account: name,
				Detail: fmt.Sprintf("%d units cancelled, %d kept unreadable as %q; token and keys destroyed; API keys revoked: %s; no longer scoped to it: %s",
					len(d.Cancelled), d.Units, d.Tombstone, listOrNone(d.RevokedAPIKeys), listOrNone(d.NarrowedAPIKeys))})}
			for _, id := range d.RevokedAPIKeys {
				events = append(events, *cliEvent(store.AuditEvent{At: now, Kind: store.AuditAPIKeyRevoked, Account: name, Detail: id + " (its only account was deleted)"}))
			}
			return events
		},
		// Run again on a deletion left unfinished: it says so when it
		// frees the name.
		AuditFinished: func(d store.AccountDeletion) []store.AuditEvent {
			return []store.AuditEvent{*cliEvent(store.DeletionFinishedEvent(d, now, "", ""))}
		},
		Moving: func(d store.AccountDeletion, left int) {
			fmt.Fprintf(env.Stderr, "automator: account %q is deleted; moving its %d ended units under %q in small batches, between which the automators' writes go on; the name is free when this command ends (stopped, run it again to finish)\n",
				name, left, d.Tombstone)
		},
	})
	unfinished := errors.Is(err, store.ErrDeletionUnfinished)
	interrupted := unfinished || errors.Is(err, store.ErrWithdrawalInterrupted)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("account %q not found; see `automator account list --data-dir %s`%s", name, shellArg(*dir), withSameDB(*db))
	case err != nil && !interrupted:
		return err
	case unfinished:
		why := "interrupted"
		if ctx.Err() == nil {
			why = err.Error()
		}
		fmt.Fprintf(env.Stderr, "automator: warning: the deletion stands, but it stopped before every unit of %q was moved under %q (%s); the name stays taken until `automator account delete %s --data-dir %s`%s moves the rest, or a serving automator does (as it starts, and every hour)\n",
			name, del.Tombstone, why, name, *dir, withSameDB(*db))
	case interrupted:
		fmt.Fprintf(env.Stderr, "automator: warning: %v; the deletion stands\n", err)
	}
	if del.Resumed {
		// Deleted before, and audited then: this run moved units only,
		// and audited that it finished the deletion.
		if !unfinished {
			fmt.Fprintf(env.Stdout, "account %q was deleted at %s already; its last %d units are now kept as %q too, and the name is free\n",
				name, del.DeletedAt.UTC().Format(time.RFC3339), del.Units, del.Tombstone)
		}
		return nil
	}

	fmt.Fprintf(env.Stdout, "account %q deleted: its token and key are destroyed, and refused by every automator from now on\n", name)
	fmt.Fprintf(env.Stdout, "units cancelled (queued or claimed): %d\n", len(del.Cancelled))
	fmt.Fprintf(env.Stdout, "units kept until the purge, listed as %q, unreadable for good: %d\n", del.Tombstone, del.Units)
	fmt.Fprintf(env.Stdout, "API keys revoked (they could use only %s): %s\n", name, listOrNone(del.RevokedAPIKeys))
	fmt.Fprintf(env.Stdout, "API keys that no longer name %s (they keep their other accounts): %s\n", name, listOrNone(del.NarrowedAPIKeys))
	if seenErr == nil {
		fmt.Fprintf(env.Stdout, "instances that polled with %s (their configs are refused from now on: uninstall them or give them another account's profile):\n", name)
		writeSeenInstances(env.Stdout, seen, d.cfg.PollWindow, time.Now())
	} else if !errors.Is(seenErr, store.ErrNotFound) {
		fmt.Fprintf(env.Stderr, "automator: warning: the account's instances could not be listed before its deletion: %v\n", seenErr)
	}
	return nil
}

func listOrNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}
