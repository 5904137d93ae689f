package store

import (
	"fmt"
	"time"
)

// Types of credential rotation, of the audit log and of dashboard sessions
// (docs/security.md).

// AccountKey is one version of an account key. The current key seals new
// units; a previous key still opens the units sealed with it, and may be
// handed to proxy instances that hold only it until UsableUntil (the
// overlap window of its rotation).
type AccountKey struct {
	KeyID     uint32
	SealedKey []byte // sealed with the master key, bound to the account and key id
	Current   bool
	// RetiredAt is when a rotation replaced the key; zero for the current one.
	RetiredAt time.Time
	// UsableUntil ends the overlap window of a previous key; zero for the
	// current one.
	UsableUntil time.Time
}

// Usable reports whether the key may still be used for proxies at now: the
// current key always, a previous one before the end of its overlap window.
func (k AccountKey) Usable(now time.Time) bool {
	return k.Current || now.Before(k.UsableUntil)
}

type AccountGetByTokenParams struct {
	TokenHash []byte
	Now       time.Time
}

type AccountRotateParams struct {
	Name string
	// TokenHash, when set, becomes the account's token. The token it
	// replaces stays valid until PreviousUntil; earlier previous tokens
	// keep their own windows, unless PreviousUntil is at or before Now.
	TokenHash []byte
	// KeyID and SealedKey, when KeyID is not 0, become the account's
	// current key. KeyID must be above every key id the account has had.
	// The key it replaces stays usable until PreviousUntil.
	KeyID     uint32
	SealedKey []byte
	// PreviousUntil ends the overlap window of what is replaced; at or
	// before Now there is none (the old token is refused at once, the old
	// key is no longer handed to proxies), and the windows of earlier
	// rotations end too: only the new token (and key) work from Now on.
	PreviousUntil time.Time
	Now           time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction as the rotation, and not when it is refused.
	Audit *AuditEvent
}

type APIKeyRevokeParams struct {
	ID  string
	Now time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction when this call revokes the key: not when the key was
	// revoked already, or is unknown.
	Audit *AuditEvent
}

// Kinds of audit events.
const (
	AuditWorkQueued       = "work.queued"       // a caller queued a unit
	AuditWorkDuplicate    = "work.duplicate"    // a repeated idempotency key returned an existing unit
	AuditWorkRefused      = "work.refused"      // a caller's unit was refused by a limit (queue full)
	AuditWorkEnded        = "work.ended"        // a unit reached a terminal state (Outcome)
	AuditAuthFailed       = "auth.failed"       // a token or API key was refused
	AuditAuthDenied       = "auth.denied"       // a valid API key was used outside its accounts
	AuditAuthRateLimited  = "auth.rate_limited" // a source went over its budget of failed authentications
	AuditAccountCreated   = "account.created"
	AuditAccountDeleted   = "account.deleted"
	AuditTokenRotated     = "account.token_rotated"
	AuditKeyRotated       = "account.key_rotated"
	AuditAPIKeyCreated    = "apikey.created"
	AuditAPIKeyRevoked    = "apikey.revoked"
	AuditCertRenewed      = "server.cert_renewed"
	AuditBackup           = "database.backup"    // `automator backup` began copying the database
	AuditRestore          = "database.restore"   // `automator restore` put a backup in place, or ended the open units
	AuditRepair           = "database.repair"    // `automator repair` rebuilt a damaged database
	AuditLost             = "audit.lost"         // an event lost in a damaged database, its place kept by `automator repair --salvage`
	AuditDashboardSignIn  = "dashboard.sign_in"  // an API key signed in to the dashboard
	AuditDashboardSignOut = "dashboard.sign_out" // a dashboard session was signed out of
)

// AuditAccountDeletionFinished: an account deletion left unfinished (its
// units not all moved under its tombstone) was finished, by the automator
// or by `account delete` run again, which frees the name.
const AuditAccountDeletionFinished = "account.deletion_finished"

// AuditPurged: the oldest events of the audit log, past audit_retention,
// were deleted (AuditPurge).
const AuditPurged = "audit.purged"

// AuditKinds are the kinds of audit events, in the order docs/security.md
// lists them: what `automator audit --kind` accepts.
var AuditKinds = []string{
	AuditWorkQueued, AuditWorkDuplicate, AuditWorkEnded, AuditWorkRefused,
	AuditAuthFailed, AuditAuthDenied, AuditAuthRateLimited,
	AuditDashboardSignIn, AuditDashboardSignOut,
	AuditAccountCreated, AuditTokenRotated, AuditKeyRotated, AuditAPIKeyCreated, AuditAPIKeyRevoked, AuditCertRenewed,
	AuditBackup, AuditRestore, AuditRepair, AuditLost,
	AuditAccountDeleted, AuditAccountDeletionFinished,
	AuditPurged,
}

// AuditEvent is one entry of the audit log. It never holds a secret, an
// argument, stdin, env or output: only who, from where, what and when. The
// script name, part of a command, is kept sealed with the master key.
type AuditEvent struct {
	// Seq is given by the store and increases with each append.
	Seq  int64
	At   time.Time
	Kind string
	// Actor is who acted: "apikey:ID", "account:NAME" (a proxy), or
	// "cli:USER" (a command run on the automator's host).
	Actor string
	// Source is where the call came from: the peer's IP address, or the
	// host name for a CLI command.
	Source     string
	Account    string
	WorkID     string
	InstanceID string
	// Outcome is a unit's terminal state (work.ended).
	Outcome string
	// SealedScript is the unit's script name sealed with the master key
	// (crypto.MasterKey.SealAuditField), nil when the event has none.
	SealedScript []byte
	// Detail says which method was called and why a call was refused, in
	// fixed words; never caller input.
	Detail string
}

// ForWork returns the event e about unit w: its account, id, claimer and
// state filled in. The stores use it for the Audit templates of
// WorkComplete, WorkCancel and WorkExpire.
func (e AuditEvent) ForWork(w Work) AuditEvent {
	e.Account, e.WorkID, e.InstanceID, e.Outcome = w.Account, w.ID, w.InstanceID, string(w.State)
	return e
}

type AuditListParams struct {
	// Since keeps the events at or after it; zero keeps all.
	Since time.Time
	// AfterSeq keeps the events with a larger Seq (to page on).
	AfterSeq int64
	// Limit is the most events returned; it must be positive.
	Limit int
	// Account, WorkID and Kinds, when set, keep only the events of that
	// account (of its deleted namesakes too: OfAccount), of that unit, and
	// of one of those kinds; a value no store can hold as text (Text)
	// matches nothing. No index holds them: a listing reads the events
	// from Since on (from the first without it) and keeps those that
	// match, so a page may read far more events than it returns.
	Account string
	WorkID  string
	Kinds   []string
}

// AuditPurgeParams delete the old events of the audit log (AuditPurge).
type AuditPurgeParams struct {
	// Now and Retention: the events stamped more than Retention before
	// Now are deleted, and before the store's own reading of now where it
	// has one (PostgreSQL's clock; with SQLite, the newest event's stamp),
	// so that an automator whose clock runs ahead deletes no event the
	// retention keeps. Retention is MinAuditRetention at least.
	Now       time.Time
	Retention time.Duration
	// Max bounds how many events one call deletes; it must be positive.
	Max int
	// Audit is the audit.purged event appended, stamped Now, by the call
	// that records a later time than any earlier purge and deletes
	// events (a call that deletes none changes nothing); its Detail gets
	// that time added (AuditPurgedDetail).
	Audit AuditEvent
}

// MinAuditRetention is the least Retention of AuditPurge: the audit log
// always keeps at least its last day, which the databases enforce too.
const MinAuditRetention = 24 * time.Hour

// CheckAuditPurge refuses params no store runs: a Max that is not
// positive, and a Retention under MinAuditRetention.
func CheckAuditPurge(p AuditPurgeParams) error {
	if p.Max <= 0 {
		return fmt.Errorf("purging the audit log: max %d must be positive", p.Max)
	}
	if p.Retention < MinAuditRetention {
		return fmt.Errorf("purging the audit log: a retention of %v is under %v", p.Retention, MinAuditRetention)
	}
	return nil
}

// AuditPurgedDetail is the Detail of the audit.purged event of a purge of
// the events stamped before before: what the caller said (the retention)
// and what went.
func AuditPurgedDetail(said string, before time.Time) string {
	return fmt.Sprintf("%s: the events stamped before %s deleted", said, before.UTC().Format(time.RFC3339))
}

// DashboardSessionEndParams record that a dashboard session was signed out
// of (DashboardSessionEnd).
type DashboardSessionEndParams struct {
	// ID is the session's id, random, carried by its cookie.
	ID string
	// Expires is when the session would have ended anyway: past it the
	// record is no longer needed, and DashboardSessionPurge may delete it.
	Expires time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction as the record of the sign-out, so that no session is
	// ended without its record, nor a record written of a sign-out not
	// made. It is not appended when the session was already ended: a
	// second sign-out of it changes nothing. DashboardSessionEndList
	// leaves it unset.
	Audit *AuditEvent
}

type DashboardSessionPurgeParams struct {
	// ExpiredBefore: records of sessions whose Expires is before it are
	// deleted.
	ExpiredBefore time.Time
}
