package store

import (
	"fmt"
	"strings"
	"time"
)

// Deleting an account (AccountDelete) ends its open units as cancelled and
// destroys its token and keys, but keeps its units until the normal purge:
// terminal, sealed with a key that no longer exists, so unreadable for good
// (crypto-shredding). They move to a tombstone account named
// DeletedAccountName(name, at): a row of accounts with key id 0 and no key
// or usable token, which no lookup of an account returns. Its name is not a
// valid account name, so an account created later under the old name shares
// nothing with them: not a listing, not an API key's scope, not a key. A
// store may move them after the deletion commits (SQLite, in batches): the
// account's row then stays, with key id 0, until the last has moved, and
// keeps its name taken (ErrBeingDeleted); reads show its units under the
// tombstone meanwhile.

// TombstoneKeyID is the key id of a deleted account's tombstone; a real
// account's keys start at 1.
const TombstoneKeyID = 0

// deletedInfix joins an account's name and its deletion time in the name
// of its tombstone.
const deletedInfix = " (deleted "

// DeletedAccountName is the name the units of account name take when it is
// deleted at at, to the microsecond: "NAME (deleted 2026-01-02T03:04:05.678901Z)".
func DeletedAccountName(name string, at time.Time) string {
	return name + deletedInfix + at.UTC().Format("2006-01-02T15:04:05.000000Z07:00") + ")"
}

// DeletedAccountPrefix is how the names of account's tombstones begin
// (DeletedAccountName): what a listing of the records of an account, its
// deleted namesakes' included, matches beside the name itself.
func DeletedAccountPrefix(account string) string { return account + deletedInfix }

// OfAccount reports whether a unit whose account is unitAccount belongs to
// account: it is account's own, or one it had when a namesake was deleted.
func OfAccount(unitAccount, account string) bool {
	if unitAccount == account {
		return true
	}
	name, ok := DeletedAccount(unitAccount)
	return ok && name == account
}

// DeletedAccount reports whether account is the tombstone of a deleted
// account (the account of its units), and the name it had.
func DeletedAccount(account string) (name string, ok bool) {
	name, rest, ok := strings.Cut(account, deletedInfix)
	if !ok || !strings.HasSuffix(rest, ")") {
		return "", false
	}
	return name, true
}

type AccountDeleteParams struct {
	Name string
	// Reason is the reason of the units it cancels.
	Reason string
	Now    time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction for each unit cancelled, with Account, WorkID,
	// InstanceID and Outcome (cancelled) filled in from the unit.
	Audit *AuditEvent
	// AuditDeletion, when set, gives the audit events of the deletion
	// itself, appended to the audit log in its transaction (the first,
	// when a store moves the ended units in batches after it), so that
	// no deletion commits without them. It is called in that transaction,
	// possibly more than once (a transaction run again), with the
	// deletion as known then: Tombstone, DeletedAt, Cancelled, Units (the
	// units still to move included), RevokedAPIKeys and NarrowedAPIKeys
	// as AccountDelete returns them. Not for a Resumed deletion, which was
	// audited when it was made, nor a refused one.
	AuditDeletion func(d AccountDeletion) []AuditEvent
	// AuditFinished, when set, gives the audit events of finishing a
	// deletion left unfinished (Resumed: the call found the account
	// deleted already, its units still moving): appended in the
	// transaction that ends it, the one that finds no unit left to move
	// and frees the name, so the name is not freed without them. Of two
	// calls moving one deletion's units at once, only the one whose
	// transaction frees the name appends them. It is called in that
	// transaction, possibly more than once, with Name, Tombstone,
	// DeletedAt, Resumed, and in Units the units this call moved, that
	// transaction's included. Not for a deletion finished by the call
	// that made it (AuditDeletion audits it), nor on a store that moves
	// every unit in the deletion's own transaction (PostgreSQL), which
	// leaves none unfinished.
	AuditFinished func(d AccountDeletion) []AuditEvent
	// Moving, when set, is called once the deletion has committed if its
	// units are left to move in batches (AccountDelete), with the
	// deletion as known then and how many are left.
	Moving func(d AccountDeletion, left int)
	// Resume, when set, only finishes the deletion of an account being
	// deleted (AccountsBeingDeleted), as AccountDelete of its name does
	// anyway: ErrNotFound if Name is not being deleted, even when an
	// account of that name exists. It is for finishing the deletions
	// listed a moment before: one may have finished meanwhile, and its
	// name been given to a new account.
	Resume bool
}

// AccountDeletion is what deleting an account did (AccountDelete), or, as
// AccountDeletions lists it, what is known of it later (Name, Tombstone,
// DeletedAt).
type AccountDeletion struct {
	Name string
	// Tombstone is the account its units now have (DeletedAccountName).
	Tombstone string
	DeletedAt time.Time
	// Cancelled are the units that were queued or claimed, now cancelled.
	Cancelled []Work
	// Units counts all the units of the account, Cancelled included,
	// kept until the purge.
	Units int
	// RevokedAPIKeys are the ids of the API keys that could use only this
	// account, now revoked; NarrowedAPIKeys those that could use it among
	// others, which keep the others.
	RevokedAPIKeys  []string
	NarrowedAPIKeys []string
	// Resumed: the account had been deleted already, by an AccountDelete
	// that stopped before it moved every unit (ErrDeletionUnfinished);
	// this one moved the rest, Units of them, and did nothing else.
	Resumed bool
}

// DeletionFinishedEvent is the audit event of finishing the deletion d,
// left unfinished (AccountDeleteParams.AuditFinished), by actor from
// source at at: the account, its tombstone, and in d.Units the units the
// finishing call moved.
func DeletionFinishedEvent(d AccountDeletion, at time.Time, actor, source string) AuditEvent {
	return AuditEvent{At: at, Kind: AuditAccountDeletionFinished, Actor: actor, Source: source, Account: d.Name,
		Detail: fmt.Sprintf("finished a deletion left unfinished: %d more units moved under %q; the name is free", d.Units, d.Tombstone)}
}

// DeletionPurgedEvent is the audit event of a purge that ended the
// deletion d, left unfinished, finding no unit left to move
// (WorkPurgeParams.AuditFinished): it deleted the last of them, or, rarely,
// a mover had moved them and not yet freed the name.
func DeletionPurgedEvent(d AccountDeletion, at time.Time, actor, source string) AuditEvent {
	return AuditEvent{At: at, Kind: AuditAccountDeletionFinished, Actor: actor, Source: source, Account: d.Name,
		Detail: fmt.Sprintf("finished a deletion left unfinished: no unit was left to move under %q (deleted past work_retention, or moved already); the name is free", d.Tombstone)}
}
