// Package store defines the automator's persistence seam: the Store
// interface, the types it traffics in and the sentinel errors that form its
// contract. Backends live in sub-packages (sqlitestore, pgstore) and
// all pass the shared conformance suite in storetest.
//
// This package imports nothing else of ours (of pgx, only pgconn's
// sentinel of a broken connection; of modernc.org/sqlite, its error type).
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// State is the lifecycle state of a unit of work.
//
//	queued → claimed → succeeded | failed | timed_out | cancelled
//	queued → timed_out | cancelled
type State string

const (
	StateQueued    State = "queued"
	StateClaimed   State = "claimed"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateTimedOut  State = "timed_out"
	StateCancelled State = "cancelled"
)

// Terminal reports whether s is final.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateTimedOut, StateCancelled:
		return true
	}
	return false
}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	return s == StateQueued || s == StateClaimed || s.Terminal()
}

// Sentinel errors. Only the gRPC layer turns them into status codes.
var (
	// ErrNotFound: no account, work or API key with that identity.
	ErrNotFound = errors.New("not found")
	// ErrExists: a record with that identity (account name, work id, API
	// key id) already exists.
	ErrExists = errors.New("already exists")
	// ErrWithdrawalInterrupted: a withdrawal of a credential (AccountRotate,
	// APIKeyRevoke through CachedCredentials) is committed, but its context
	// ended while it waited out the automators' cached copies. The change
	// stands (and takes effect within CredentialTTL): the caller must treat
	// it as made.
	ErrWithdrawalInterrupted = errors.New("committed, but interrupted while automators drop their cached credentials")
	// ErrDeletionUnfinished: an account's deletion is committed (its
	// credentials and keys are gone, its open units cancelled), but some
	// of its ended units were not yet moved under its tombstone when
	// AccountDelete stopped (its context ended, or a write failed). The
	// deletion stands; its name stays taken until AccountDelete of that
	// name moves the rest (AccountDeletion.Resumed; a serving automator
	// does, server.FinishDeletions), or the purge deletes them.
	ErrDeletionUnfinished = errors.New("deleted, but some of its units are still to be moved under its tombstone")
	// ErrBeingDeleted: AccountCreate of a name whose account's deletion is
	// unfinished (ErrDeletionUnfinished).
	ErrBeingDeleted = errors.New("the account of that name is still being deleted")
	// ErrClaimMismatch: the work is claimed, but not under the claim id presented.
	ErrClaimMismatch = errors.New("claim id does not match")
	// ErrNotClaimable: the work is in a terminal state (or still queued), so a
	// result or claim-level change is refused.
	ErrNotClaimable = errors.New("work is not in a state that allows this")
	// ErrDuplicate: a unit with the same idempotency key already exists on
	// the account (within the retention window). WorkEnqueue returns that
	// unit alongside this error.
	ErrDuplicate = errors.New("idempotency key already used")
	// ErrExpired: a previous account token whose overlap window has ended.
	// AccountGetByToken returns the account it belonged to alongside it.
	ErrExpired = errors.New("previous token past its overlap window")
	// ErrStorageFull: the database is out of disk space. The write that
	// returns it stored nothing; writes succeed again once space is freed,
	// and reads go on meanwhile. Test for it with IsStorageFull.
	ErrStorageFull = errors.New("the database is out of disk space")
	// ErrTooManyInstances: InstanceSeen of an instance not recorded, for
	// an account that already holds InstanceSeenParams.MaxPerAccount
	// instance records. Nothing was written.
	ErrTooManyInstances = errors.New("the account holds as many instance records as it may")
	// ErrUnavailable: the database did not answer a call that was sent to
	// it within the store's own bound (it is out of reach, or stalled), so
	// the call may or may not have taken effect. Test for it with
	// IsUnavailable.
	ErrUnavailable = errors.New("the database did not answer")
	// ErrDamaged: the database's files are damaged (a disk's bad sector, a
	// file copied while it was written), so a call that reads or writes the
	// damaged part fails, and fails again until the database is repaired
	// or restored; the rest of it serves. Test for it with IsDamaged.
	ErrDamaged = errors.New("the database is damaged")
)

// DamagedTablesError is a repair's refusal of a database some of whose
// tables' rows are damaged: they cannot all be read, or their pages no
// longer hold what they held, and rebuilding the database from its
// tables' rows would lose rows, or keep changed ones. It matches
// ErrDamaged.
type DamagedTablesError struct {
	Tables []string // the tables whose rows could not all be read
	Err    error    // the first table's error
}

func (e *DamagedTablesError) Error() string {
	names := make([]string, len(e.Tables))
	for i, n := range e.Tables {
		names[i] = "table " + n
	}
	list := strings.Join(names, ", ")
	if len(names) > 1 {
		list = strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
	return fmt.Sprintf("the rows of %s are damaged (%v)", list, e.Err)
}

func (e *DamagedTablesError) Unwrap() []error { return []error{ErrDamaged, e.Err} }

// SchemaBehindError is Ping's error when the database answers but its
// schema is older than this binary's (a migration not applied yet), as
// opposed to a database that does not answer: test for it with errors.As.
type SchemaBehindError struct {
	Version int // the database's
	Want    int // this binary's
}

func (e *SchemaBehindError) Error() string {
	return fmt.Sprintf("the schema is at version %d, this automator needs %d", e.Version, e.Want)
}

// NotCancellable is WorkCancel's refusal of unit w, as read after the
// refusal: ended already, or past its deadline (due to time out).
func NotCancellable(w Work) error {
	if w.State.Terminal() {
		return fmt.Errorf("it is already %s: %w", w.State, ErrNotClaimable)
	}
	return fmt.Errorf("its deadline %s has passed: it times out: %w", w.Deadline.UTC().Format(time.RFC3339Nano), ErrNotClaimable)
}

// NotCompletable is WorkComplete's refusal of a result for unit w under
// claimID, as read after the refusal: not claimed (ended already, or still
// queued), claimed under another claim id, or past its deadline.
func NotCompletable(w Work, claimID string) error {
	switch {
	case w.State != StateClaimed:
		return fmt.Errorf("it is %s: %w", w.State, ErrNotClaimable)
	case w.ClaimID != claimID:
		return ErrClaimMismatch
	default:
		return fmt.Errorf("its deadline %s has passed: %w", w.Deadline.Format(time.RFC3339Nano), ErrNotClaimable)
	}
}

// IsStorageFull reports whether err says the database is out of disk
// space: ErrStorageFull (the SQLite store wraps its SQLITE_FULL in it), or
// an error carrying SQLSTATE 53100, disk_full, as PostgreSQL's do.
func IsStorageFull(err error) bool {
	if errors.Is(err, ErrStorageFull) {
		return true
	}
	var sqlState interface{ SQLState() string }
	return errors.As(err, &sqlState) && sqlState.SQLState() == "53100"
}

// IsDamaged reports whether err says the database is damaged: ErrDamaged,
// SQLite's SQLITE_CORRUPT or SQLITE_NOTADB (a page or a header that is not
// what SQLite wrote), or SQLSTATE XX001 or XX002 (data_corrupted,
// index_corrupted), as PostgreSQL's are.
func IsDamaged(err error) bool {
	if errors.Is(err, ErrDamaged) {
		return true
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff
		return code == sqlite3.SQLITE_CORRUPT || code == sqlite3.SQLITE_NOTADB
	}
	var sqlState interface{ SQLState() string }
	if errors.As(err, &sqlState) {
		code := sqlState.SQLState()
		return code == "XX001" || code == "XX002"
	}
	return false
}

// IsLocked reports whether err says another program held the database
// locked past the store's wait for it: SQLite's SQLITE_BUSY or
// SQLITE_LOCKED (a sqlite3 shell or a tool holding a write transaction
// open on the file). The call took no effect; it may succeed once the
// other program lets go.
func IsLocked(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff
		return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
	}
	return false
}

// IsUnavailable reports whether err says the database could not be
// reached, or dropped the connection a call was on: PostgreSQL shutting
// down, crashed or still starting (SQLSTATE 57P01, 57P02, 57P03), refusing
// a new connection for now because it has too many (53300, for the server
// or for the role), ending a session that sat in a transaction past
// idle_in_transaction_session_timeout (25P03: the replica or its link to
// the database stalled; the transaction did not commit), a connection
// exception (class 08), a network error, a connection that
// ended in the middle of an answer, one used after it broke (pgconn's
// ErrConnClosed), or no answer within the store's bound (ErrUnavailable,
// although the bound is a context's deadline). Such a call may or may not have taken
// effect, as when the automator itself is unreachable; it can be made again
// once the database is back. SQLite's errors are never of this kind.
func IsUnavailable(err error) bool {
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	var sqlState interface{ SQLState() string }
	if errors.As(err, &sqlState) {
		code := sqlState.SQLState()
		return code == "57P01" || code == "57P02" || code == "57P03" || code == "53300" || code == "25P03" || strings.HasPrefix(code, "08")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // a context's end (which is a net.Error too) is not the database's
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed)
}

// Account is a named queue with a token (authenticates proxies) and a key
// (seals commands and results). Only the token's SHA-256 and the key sealed
// with the master key are stored.
type Account struct {
	Name      string
	TokenHash []byte // SHA-256 of the current token, even when found by a previous one
	KeyID     uint32 // id of the current key
	SealedKey []byte // the current account key, sealed with the master key
	CreatedAt time.Time
	// PreviousTokenUntil is set by AccountGetByToken when the token it
	// matched is a previous one: the end of that token's overlap window
	// (WithdrawnTokenUntil for one replaced with no overlap). Zero for
	// the current token.
	PreviousTokenUntil time.Time
}

// WithdrawnTokenUntil is the end of the window that AccountRotate keeps
// the token it replaces with no overlap under: long past on every clock,
// so that no replica, however far behind the rotating host's clock its own
// is, takes the token; kept, the token is refused as expired rather than
// unknown, which tells its proxies to install the new profile.
var WithdrawnTokenUntil = time.Unix(1, 0).UTC()

// Work is one executeOnProxy call.
type Work struct {
	ID            string
	Account       string
	State         State
	KeyID         uint32
	SealedCommand []byte
	QueuedAt      time.Time
	Deadline      time.Time
	ClaimedAt     time.Time // zero until claimed
	InstanceID    string    // the claimer; empty until claimed
	ClaimID       string    // random id the claimer must present to complete
	FinishedAt    time.Time // zero until terminal
	SealedResult  []byte    // nil unless a result was posted
	Reason        string    // why it ended (timeout, failure, cancel), never secret
	// IdempotencyKey is the caller's key for safe retries of a submit; empty
	// when none was given (or after it aged out of the retention window).
	IdempotencyKey string
}

// InstanceForgetDays is how many days the record of a proxy instance that
// stopped polling is kept (listings, the dashboard, metrics): serve
// deletes the records of instances that have not polled for
// InstanceForgetAfter (InstancePurge). An instance is named by its proxy
// (by default its host name), so a proxy in a container that gets a new
// name at each start, or a token's holder making names up, would
// otherwise add records for ever. An instance that polls again is
// recorded again; a warm standby stopped for longer simply reappears when
// started. What says how long (the reason of a unit no instance claimed,
// the listings' notes, the metrics' help) derives from it.
const InstanceForgetDays = 30

// InstanceForgetAfter is InstanceForgetDays as a duration.
const InstanceForgetAfter = InstanceForgetDays * 24 * time.Hour

// Instance is what the automator knows of one proxy process of an account,
// refreshed on every poll. Instances are never registered: they appear
// when they poll, and serve forgets one that has not polled for
// InstanceForgetAfter (InstancePurge).
type Instance struct {
	Account    string
	InstanceID string
	Hostname   string
	Version    string
	LastPollAt time.Time
	// Stopped is set when the instance said at its latest poll that it was
	// stopping (a graceful stop: InstanceSeenParams.Stopping). It is not
	// online, however recent that poll, until it polls again without
	// saying so.
	Stopped bool
	// RefusedKeyIDs is not empty when the instance's latest poll was
	// refused because it holds no key of its account usable then (a proxy
	// still on the profile of before `automator account rotate-key`): the
	// key ids that poll listed (InstanceSeenParams.RefusedKeyIDs). It
	// claims nothing, so it is not online however recent that poll, until
	// a poll of it is accepted.
	RefusedKeyIDs []uint32
	// RefusedTokenExpired is set when the instance's latest poll was
	// refused because the account token it presented had expired: it was
	// the account's token before a rotation whose overlap window has
	// ended (InstanceSeenParams.TokenExpired; a proxy still running the
	// whole profile of before `automator account rotate-key`). It claims
	// nothing, so it is not online however recent that poll, until a poll
	// of it is accepted. RefusedKeyIDs is then empty.
	RefusedTokenExpired bool
	// RefusedWrongKey is set when the instance's latest poll was refused
	// because a key it holds under one of the account's key ids is not the
	// account's key of that id (another account's key, or a mistyped one:
	// InstanceSeenParams.WrongKey). RefusedKeyIDs are then the key ids
	// that poll listed. It claims nothing, so it is not online however
	// recent that poll, until a poll of it is accepted.
	RefusedWrongKey bool
	// InFlight is the number of the account's units claimed by this
	// instance and not yet ended (state claimed), counted from the units
	// when listed: not what the instance said at its last poll. An
	// instance that died keeps its units in flight until they end (at
	// their deadline at the latest), then shows 0.
	InFlight int
}

// Replica is one automator process sharing the store, as its last heartbeat
// described it. Replicas are never registered: a replica appears with its
// first heartbeat, and one that stopped keeps its row (its LastSeen tells
// how long ago) until ReplicaPurge deletes it.
type Replica struct {
	ReplicaID string
	Hostname  string
	Version   string
	StartedAt time.Time // when the process started
	LastSeen  time.Time // its latest heartbeat
}

// APIKey authenticates callers of the AutomatorService.
type APIKey struct {
	ID        string // public identifier, shown in listings and logs
	Hash      []byte // SHA-256 of the secret
	Name      string
	CreatedAt time.Time
	// Accounts are the accounts the key may use (execute on, read and
	// cancel units of); empty means every account.
	Accounts []string
	// RevokedAt is when the key was revoked; zero while it is valid. A
	// revoked key is still returned by APIKeyGetByHash: callers refuse it.
	RevokedAt time.Time
}

type AccountCreateParams struct {
	Name      string
	TokenHash []byte
	KeyID     uint32
	SealedKey []byte
	Now       time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction as the new account, so that no account is made without
	// its record, nor a record written of one not made.
	Audit *AuditEvent
}

type WorkEnqueueParams struct {
	ID            string
	Account       string
	KeyID         uint32
	SealedCommand []byte
	Now           time.Time // becomes QueuedAt
	Deadline      time.Time
	// IdempotencyKey, when set, makes the enqueue happen at most once per
	// account and key: a second enqueue returns the first unit with
	// ErrDuplicate. A unique constraint enforces it, so it holds across
	// automator replicas.
	IdempotencyKey string
	// IdempotencySince is the start of the retention window: a unit with the
	// same key queued before it no longer counts (its key is forgotten).
	IdempotencySince time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction as the new unit, so no unit exists without its record.
	// It is not appended when the enqueue fails or finds a duplicate.
	Audit *AuditEvent
	// SyncLater lets the store answer before the new unit is on disk, for
	// a unit whose id nobody outside the automator learns before it is
	// claimed (ExecuteOnProxy answers only with the outcome): it becomes
	// durable with the next durable write, at the latest the claim that
	// takes it, since a log-structured store makes a write durable only
	// with every write before it. A crash before that loses a unit that no
	// proxy saw and whose caller gets an error. A backend may ignore it.
	SyncLater bool
	// ClaimFor, when set, stores the unit already claimed, by
	// ClaimFor.InstanceID under ClaimFor.ClaimID, at Now: the automator
	// hands such a unit straight to a poll that waits for work, and no
	// other poll can claim it. SyncLater is ignored then: a claim is on
	// disk before its claimer sees it.
	ClaimFor *ClaimRef
}

// ClaimRef names a claim: the instance that holds it and its claim id, and
// the poll it is handed to (ClaimPoll).
type ClaimRef struct {
	InstanceID string
	ClaimID    string
	ClaimPoll
}

// ClaimPoll names the poll a claim is made for: the proxy process's run id
// and the poll's number in that run (PollRequest.run_id and poll_seq). Zero
// when the poll did not say (a proxy predating them). A proxy that later says
// it never read that poll's answer has its units found by
// WorkClaimedByPolls.
type ClaimPoll struct {
	Run  string
	Poll int64
}

type WorkClaimParams struct {
	Account    string
	InstanceID string
	// Max is the number of units to claim at most (the caller's free slots).
	Max int
	// ClaimIDs holds at least Max fresh random claim ids; the i-th claimed
	// unit gets ClaimIDs[i].
	ClaimIDs []string
	Now      time.Time
	// ClaimPoll is the poll the units are claimed for, recorded with each.
	ClaimPoll
	// Expect: the caller knows a unit of the account was queued since its
	// last claim that found nothing, so a backend may skip a cheap look for
	// an empty queue (sqlitestore's on the read pool) and claim at once.
	// The result is the same either way.
	Expect bool
	// MaxBytes, when above 0, bounds the sealed commands of the units
	// claimed, together: the claim stops, oldest first, before the unit
	// that would take it past MaxBytes, so the claims fit in one answer.
	// The oldest claimable unit is always claimed, whatever its size.
	MaxBytes int
}

// WorkClaimedByPollsParams names polls of one proxy process whose answers
// never reached it.
type WorkClaimedByPollsParams struct {
	Account    string
	InstanceID string
	Run        string
	// FromPoll and ToPoll bound the polls' numbers in the run, both
	// included.
	FromPoll, ToPoll int64
}

type WorkCompleteParams struct {
	ID      string
	ClaimID string
	// Account, when set, is the account the claimer authenticated as: a
	// unit of another account is ErrNotFound and nothing changes.
	Account string
	// State is the terminal state the claimer reports: succeeded, failed or
	// cancelled. Any other state is an error and changes nothing.
	State        State
	SealedResult []byte
	Reason       string
	Now          time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction when the unit changes, with Account, WorkID, InstanceID
	// and Outcome (the new state) filled in from the unit.
	Audit *AuditEvent
}

type WorkCancelParams struct {
	ID     string
	Reason string
	Now    time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction when the unit changes, with Account, WorkID, InstanceID
	// and Outcome (the new state) filled in from the unit.
	Audit *AuditEvent
}

type WorkExpireParams struct {
	Now time.Time
	// OnlineSince: an instance whose last poll is at or after it is online,
	// unless it said at that poll that it was stopping (as in
	// AccountStatsParams). The reason of a unit no instance claimed says
	// how many of its account's instances were online (ExpireReason).
	OnlineSince time.Time
	// Max bounds how many units one call expires (0 means no bound).
	Max int
	// ID, when set, names a unit that is timed out too when it is due,
	// beyond Max: a call about that unit (its result, its cancel, its
	// caller waiting at its deadline) ends it then, however many units
	// fell due before it.
	ID string
	// Audit, when set, is appended to the audit log in the same
	// transaction for each unit expired, with Account, WorkID, InstanceID
	// and Outcome (timed_out) filled in from the unit.
	Audit *AuditEvent
}

// ExpireNamed is how many of an account's instances the reason of a unit
// no instance claimed names at most (ExpireReason).
const ExpireNamed = 3

// AccountInstances is what WorkExpire reads, once per call, of the
// instances of each account with a due unit no instance claimed: from the
// records every replica writes (instances' last polls, and whether that
// poll said the instance was stopping), as listings read them.
type AccountInstances struct {
	Instances int // recorded (polled, and not forgotten since: InstancePurge)
	// Online of them polled at or after WorkExpireParams.OnlineSince and
	// did not say at that poll that they were stopping, nor were refused
	// at it for want of a usable key.
	Online int
	// Refused of them polled at or after WorkExpireParams.OnlineSince and
	// were refused at that poll for want of a usable key
	// (Instance.RefusedKeyIDs), and did not say they were stopping: they
	// poll, and claim nothing until their profile is replaced.
	Refused int
	// Claimed is how many units of the account the Online instances held
	// claimed at the expiry: those they were running, when they claimed
	// none of those that timed out (busy, at their max_concurrency).
	Claimed int
	// Latest holds up to ExpireNamed of them: the Refused ones first, then
	// the others, each part latest poll first (then by instance id); only
	// Account, InstanceID, LastPollAt, Stopped, RefusedKeyIDs,
	// RefusedTokenExpired and RefusedWrongKey are set.
	Latest []Instance
}

// RefusedCause is why a poll was refused: "" when it was not. Its values
// are those of `automator instances --json`'s refused_cause.
type RefusedCause string

const (
	// RefusedNoUsableKey: the poll listed no key of its account usable now
	// (InstanceSeenParams.RefusedKeyIDs, Instance.RefusedKeyIDs).
	RefusedNoUsableKey RefusedCause = "no_usable_key"
	// RefusedTokenExpired: the poll presented the account's token of
	// before a rotation whose overlap has ended
	// (InstanceSeenParams.TokenExpired, Instance.RefusedTokenExpired). It
	// is also what both stores keep in instances.refused_cause for such a
	// poll (RefusedCauseText).
	RefusedTokenExpired RefusedCause = "token_expired"
	// RefusedWrongKey: the poll listed a key id whose key check was not
	// that of the account's key of that id (InstanceSeenParams.WrongKey,
	// Instance.RefusedWrongKey): the instance holds another account's
	// key, or a mistyped one. Both stores keep it in
	// instances.refused_cause, beside the key ids the poll listed.
	RefusedWrongKey RefusedCause = "wrong_key"
)

// refusedCause is the cause of a poll refused for a wrong key, with keyIDs
// listed, or for an expired token: a wrong key first, then the key ids
// say it when there are any.
func refusedCause(keyIDs []uint32, wrongKey, tokenExpired bool) RefusedCause {
	switch {
	case wrongKey:
		return RefusedWrongKey
	case len(keyIDs) > 0:
		return RefusedNoUsableKey
	case tokenExpired:
		return RefusedTokenExpired
	}
	return ""
}

// RefusedCause is why the instance's latest poll was refused; "" when it
// was not.
func (in Instance) RefusedCause() RefusedCause {
	return refusedCause(in.RefusedKeyIDs, in.RefusedWrongKey, in.RefusedTokenExpired)
}

// Refused reports whether the instance's latest poll was refused, for
// want of a usable key, for a wrong key or for an expired account token.
func (in Instance) Refused() bool { return in.RefusedCause() != "" }

// RefusedCause is why the poll was refused; "" when it was not.
func (p InstanceSeenParams) RefusedCause() RefusedCause {
	return refusedCause(p.RefusedKeyIDs, p.WrongKey, p.TokenExpired)
}

// Refused reports whether the poll was refused, for want of a usable key,
// for a wrong key or for an expired account token.
func (p InstanceSeenParams) Refused() bool { return p.RefusedCause() != "" }

// RefusedCauseText is what both stores keep in instances.refused_cause
// for poll p: RefusedTokenExpired for a poll refused for its token,
// RefusedWrongKey for one refused for a wrong key, "" for any other (one
// refused for want of a usable key keeps its key ids). A wrong key's
// poll keeps its key ids too, so an automator predating the cause lists
// it as refused for want of a usable key: refused all the same.
func RefusedCauseText(p InstanceSeenParams) string {
	if c := p.RefusedCause(); c == RefusedTokenExpired || c == RefusedWrongKey {
		return string(c)
	}
	return ""
}

// ExpireReason is the reason WorkExpire gives unit w (due, still open):
// whether it was ever claimed and by whom, the one clue an operator has
// when a claimer died; for a unit never claimed, what its account's
// instances were doing (neverClaimedReason). Both backends give it in
// the same words.
func ExpireReason(w Work, a AccountInstances) string {
	if w.State == StateClaimed {
		return fmt.Sprintf("claimed by instance %s at %s, no result before the deadline",
			w.InstanceID, w.ClaimedAt.UTC().Format(time.RFC3339Nano))
	}
	return neverClaimedReason(w.Account, a)
}

// ExpireReasons returns ExpireReason for the units of a call of
// WorkExpire, given the instances of the accounts of its units never
// claimed (an account left out has none): the reason of each account's
// units never claimed is put in words once.
func ExpireReasons(instances map[string]AccountInstances) func(Work) string {
	said := map[string]string{}
	return func(w Work) string {
		if w.State == StateClaimed {
			return ExpireReason(w, AccountInstances{})
		}
		r, ok := said[w.Account]
		if !ok {
			r = ExpireReason(w, instances[w.Account])
			said[w.Account] = r
		}
		return r
	}
}

// UnclaimedAccounts returns the accounts of the units of due that no
// instance claimed, each once: those whose instances WorkExpire reads.
func UnclaimedAccounts(due []Work) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range due {
		if w.State != StateClaimed && !seen[w.Account] {
			seen[w.Account] = true
			out = append(out, w.Account)
		}
	}
	return out
}

// UnclaimedReason begins the reason of every unit that timed out with no
// instance having claimed it (neverClaimedReason), whatever follows.
const UnclaimedReason = "no instance claimed it before the deadline"

// neverClaimedReason says why no instance of account claimed a unit, in
// one sentence its caller can act on: the account has no instance; none
// was online (the latest few named, stopped or when each last polled); or
// some were online and still claimed nothing (all busy at their
// max_concurrency, or polling for no units), with how many units of the
// account they were running at the deadline. Either way, the instances
// that polled and were refused, for want of a usable key or for an
// expired account token (a profile of before a key rotation), are named
// first, with the cause and the fix.
//
// What it says is what the store held at the expiry. A replica writes an
// instance's polls every few seconds (the automator's seenEvery, 5 s), not
// one by one, so a last poll named may be up to that much older than the
// instance's latest; an instance counts as online for two poll windows
// plus those seconds after its last poll, as in listings, so one that died
// within that time still counts. A stop, and an instance's first poll, are
// written as they come.
func neverClaimedReason(account string, a AccountInstances) string {
	const unclaimed = UnclaimedReason
	// The instances that poll and are refused for want of a usable key
	// (the first of Latest) are named first: a profile to install is the
	// cause an operator can act on at once.
	named := min(a.Refused, len(a.Latest))
	refused := refusedClause(a.Latest[:named], a.Refused-named)
	switch {
	case a.Instances == 0:
		// serve forgets an instance that has not polled for
		// InstanceForgetAfter.
		return fmt.Sprintf("%s: account %s has no proxy instance (none has polled in %d days, if ever); start one with the account's profile", unclaimed, account, InstanceForgetDays)
	case a.Online > 0:
		online := "1 instance online"
		if a.Online > 1 {
			online = fmt.Sprintf("%d instances online", a.Online)
		}
		// What they were doing instead, most often: running others (a
		// review; the reason said only that they were online).
		switch a.Claimed {
		case 0:
		case 1:
			online += ", running 1 of the account's units"
		default:
			online += fmt.Sprintf(", running %d of the account's units", a.Claimed)
		}
		if refused != "" {
			online += "; " + refused
		}
		return fmt.Sprintf("%s (%s)", unclaimed, online)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: no instance of account %s was online (", unclaimed, account)
	parts := 0
	if refused != "" {
		b.WriteString(refused)
		parts++
	}
	for _, in := range a.Latest[named:] {
		if parts > 0 {
			b.WriteString("; ")
		}
		parts++
		what := "last polled at"
		if in.Stopped {
			what = "stopped at"
		}
		fmt.Fprintf(&b, "%s %s %s", in.InstanceID, what, in.LastPollAt.UTC().Format(time.RFC3339))
	}
	if more := a.Instances - len(a.Latest) - (a.Refused - named); more > 0 {
		if parts > 0 {
			b.WriteString("; and ")
		}
		fmt.Fprintf(&b, "%d more", more)
	}
	b.WriteString(")")
	return b.String()
}

// refusedClause says that the instances of refused, and more others, poll
// but are refused, and what to do; "" when there are none. Those refused
// for want of a usable key are said first, then those whose account token
// expired (Instance.RefusedTokenExpired), then those holding a wrong key
// (Instance.RefusedWrongKey), each cause in its own clause;
// the more not named are counted in the first clause said.
func refusedClause(refused []Instance, more int) string {
	if len(refused) == 0 && more == 0 {
		return ""
	}
	var noKey, expired, wrongKey []string
	for _, in := range refused {
		switch {
		case in.RefusedWrongKey:
			wrongKey = append(wrongKey, in.InstanceID)
		case in.RefusedTokenExpired:
			expired = append(expired, in.InstanceID)
		default:
			noKey = append(noKey, in.InstanceID)
		}
	}
	clause := func(ids []string, more int, one, many string) string {
		who := strings.Join(ids, ", ")
		if more > 0 {
			who += fmt.Sprintf(" and %d more", more)
		}
		if len(ids) == 1 && more == 0 {
			return fmt.Sprintf("instance %s %s: install the account's latest profile", who, one)
		}
		return fmt.Sprintf("instances %s %s: install the account's latest profile", who, many)
	}
	var parts []string
	if len(noKey) > 0 || len(expired) == 0 && len(wrongKey) == 0 {
		parts = append(parts, clause(noKey, more, "polls but holds no usable key", "poll but hold no usable key"))
		more = 0
	}
	if len(expired) > 0 {
		parts = append(parts, clause(expired, more, "polls but its account token expired", "poll but their account token expired"))
		more = 0
	}
	if len(wrongKey) > 0 {
		parts = append(parts, clause(wrongKey, more, "polls but holds a key that is not the account's (another account's, or a mistyped one)",
			"poll but hold a key that is not the account's (another account's, or a mistyped one)"))
	}
	return strings.Join(parts, "; ")
}

// WorkEndOpenParams end every open unit (WorkEndOpen).
type WorkEndOpenParams struct {
	// Reason says why the units ended; a claimed unit's reason adds which
	// instance claimed it and when (EndOpenReason).
	Reason string
	Now    time.Time // becomes FinishedAt
	// Max bounds how many units one call ends (0 means no bound).
	Max int
	// Audit, when set, is appended to the audit log in the same
	// transaction for each unit ended, with Account, WorkID, InstanceID
	// and Outcome (timed_out) filled in from the unit.
	Audit *AuditEvent
}

// EndOpenReason is the reason WorkEndOpen gives unit w (still open): the
// params' reason, and for a claimed unit its claimer, the one clue to
// where its script may have run.
func EndOpenReason(reason string, w Work) string {
	if w.State == StateClaimed {
		return fmt.Sprintf("%s (claimed by instance %s at %s)", reason, w.InstanceID, w.ClaimedAt.UTC().Format(time.RFC3339Nano))
	}
	return reason + " (it was queued, not claimed)"
}

type AccountKeysPurgeParams struct {
	Now time.Time
	// Grace: how long after its overlap ended a previous key is kept at
	// least.
	Grace time.Duration
}

type WorkPurgeParams struct {
	// QueuedBefore: ended units queued before it are deleted.
	QueuedBefore time.Time
	// Max bounds how many units one call deletes (at least 1).
	Max int
	// AuditFinished, when set, gives the audit events of each account
	// deletion left unfinished that the call ends, finding no unit of it
	// left to move (this purge or an earlier one deleted them, or a mover
	// moved them and has not freed the name yet), which frees its name:
	// Name, Tombstone, DeletedAt and Resumed, Units 0. They are appended
	// in the call's transaction. Only a store that leaves deletions unfinished
	// (AccountsBeingDeleted: SQLite) has any to end.
	AuditFinished func(d AccountDeletion) []AuditEvent
}

type InstanceSeenParams struct {
	Account    string
	InstanceID string
	Hostname   string
	Version    string
	// Running is how many units the instance said it was running when the
	// poll began (PollRequest.running). It is stored (column in_flight)
	// only for automators of earlier versions sharing the database, which
	// list it as the instance's in-flight count; InstanceList counts the
	// claimed units instead (Instance.InFlight).
	Running int
	// Stopping is set for a poll of a proxy process that is stopping
	// gracefully (PollRequest.stopping): the instance is recorded as
	// stopped (Instance.Stopped), until a poll without it.
	Stopping bool
	// RefusedKeyIDs, when not empty, marks a poll refused because the
	// instance holds no usable key of its account: the key ids it listed.
	// The instance is recorded as refused (Instance.RefusedKeyIDs) until a
	// poll without it.
	RefusedKeyIDs []uint32
	// WrongKey marks a poll refused because a key the instance holds under
	// one of the account's key ids is not the account's key of that id
	// (PollRequest.key_checks); RefusedKeyIDs are then the key ids it
	// listed. The instance is recorded as refused (Instance.RefusedWrongKey)
	// until a poll without it.
	WrongKey bool
	// TokenExpired marks a poll refused at authentication because the
	// account token it presented was the account's before a rotation
	// whose overlap window has ended (ErrExpired); RefusedKeyIDs is then
	// empty. The instance is recorded as refused
	// (Instance.RefusedTokenExpired) until a poll without it.
	TokenExpired bool
	// Run and PollSeq are the poll's run id and number
	// (PollRequest.run_id and poll_seq; "" and 0 from a proxy predating
	// them). Polls of one run are ordered by their numbers: a poll of the
	// run of the instance's stored poll, numbered before it, changes
	// nothing, however late it is written (a poll still on its way when
	// the process polled again, saying it stops, does not end the stop).
	Run     string
	PollSeq int64
	// AccountCreatedAt is when the account the poll was authenticated as
	// was created (Account.CreatedAt, as the store gave it). When set, the
	// poll is recorded only while the account of that name is that one:
	// not under an account created again under the name after the one
	// polled was deleted. Zero: under any account of the name.
	AccountCreatedAt time.Time
	// MaxPerAccount, when positive, bounds the account's instance records
	// for InstanceSeen: a poll of an instance not recorded, while the
	// account holds that many, takes the place of a record whose last
	// poll is before EvictBefore (an instance offline: gone, stopped, or
	// an id a flood made up once), whose id is given to Evicted when set;
	// with none such, it is not recorded (ErrTooManyInstances). The
	// instance id is the proxy's to choose, so without it one account's
	// token could fill the database (a review: 437,584 rows in two
	// minutes, and every account's metrics failing to read). Polls of new
	// instances of one account are counted and written one at a time, on
	// every replica. InstancesSeen does not check it: it writes only
	// instances recorded.
	MaxPerAccount int
	EvictBefore   time.Time
	Evicted       func(instanceID string)
	Now           time.Time
}

type InstancePurgeParams struct {
	// PolledBefore: instances whose latest poll is older are deleted.
	PolledBefore time.Time
}

type ReplicaPurgeParams struct {
	// SeenBefore: rows whose last heartbeat is older are deleted.
	SeenBefore time.Time
}

type ReplicaHeartbeatParams struct {
	ReplicaID string
	Hostname  string
	Version   string
	StartedAt time.Time
	Now       time.Time // becomes LastSeen
}

type APIKeyCreateParams struct {
	ID   string
	Hash []byte
	Name string
	// Accounts the key may use; empty for every account. An account
	// named more than once is stored once (DistinctAccounts).
	Accounts []string
	Now      time.Time
	// Audit, when set, is appended to the audit log in the same
	// transaction as the new key, and not when the key is refused.
	Audit *AuditEvent
}

// DistinctAccounts returns accounts with each name kept once, where it
// first appears. A scope must hold an account once: deleting it removes
// every copy, and a key left with none would be a key for every account.
func DistinctAccounts(accounts []string) []string {
	var out []string
	for _, a := range accounts {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// AccountStats is the queue and the instances of one account at one moment,
// for listings, the dashboard and metrics.
type AccountStats struct {
	Account string
	// Queued is the number of queued units; OldestQueuedAt is when the
	// oldest of them was queued (zero when none is).
	Queued         int
	OldestQueuedAt time.Time
	// Claimed is the number of units in flight (claimed, not yet ended).
	Claimed int
	// Instances is the number of instances recorded for the account (that
	// polled, and were not forgotten since: InstancePurge); InstancesOnline of them polled at or after the params'
	// OnlineSince and did not say at that poll that they were stopping
	// (Instance.Stopped), nor were refused at it (Instance.Refused).
	// InstancesRefused of them polled at or after OnlineSince and were
	// refused at that poll, for want of a usable key or for an expired
	// account token, and did not say at it that they were stopping: proxies
	// that are up but hold a stale profile, counted apart from those online.
	Instances        int
	InstancesOnline  int
	InstancesRefused int
	// LastPollAt is the latest poll of any of its instances; zero when none
	// ever polled.
	LastPollAt time.Time
}

type AccountStatsParams struct {
	// OnlineSince: an instance whose last poll is at or after it is online,
	// unless it said at that poll that it was stopping, or that poll was
	// refused (for want of a usable key, or for an expired account token).
	OnlineSince time.Time
	// Account: only this account's statistics (none when it is no
	// account, or one being deleted); "" for every account's. A page of
	// one account reads its row alone.
	Account string
}

// WorkListParams select and page units, newest first.
type WorkListParams struct {
	Account string // only this account's units; "" for every account
	State   State  // only units in this state; "" for every state
	// Limit is the most units returned; it must be positive.
	Limit int
	// BeforeQueuedAt and BeforeID continue a listing after its last unit:
	// only units queued before BeforeQueuedAt, or at it with an id before
	// BeforeID, are listed. A zero BeforeQueuedAt starts at the newest.
	BeforeQueuedAt time.Time
	BeforeID       string
	// WithoutSealed leaves the sealed command and result out of the
	// listed units (nil), for a listing that shows neither: they may
	// weigh megabytes a unit.
	WithoutSealed bool
}

// Store is the whole persistence seam. Every write is durable when the call
// returns (it survives kill -9 of the process), but a WorkEnqueue with
// SyncLater may be answered before it is (WorkEnqueueParams.SyncLater).
// Consumers declare the few methods they use as their own narrow
// interfaces.
type Store interface {
	// AccountCreate adds an account; ErrExists if the name is taken.
	AccountCreate(ctx context.Context, p AccountCreateParams) (Account, error)
	// AccountGet returns the account by name, or ErrNotFound.
	AccountGet(ctx context.Context, name string) (Account, error)
	// AccountGetByTokenHash returns the account whose token hashes to h, or ErrNotFound.
	AccountGetByTokenHash(ctx context.Context, h []byte) (Account, error)
	// AccountList returns all accounts ordered by name.
	AccountList(ctx context.Context) ([]Account, error)
	// AccountDelete deletes an account (deleted.go): in one transaction,
	// its queued and claimed units become cancelled with p.Reason and move
	// to its tombstone, its instances, tokens and keys (current and
	// previous) are removed, the API keys that could use only it are
	// revoked and the others no longer name it. Its ended units move to
	// its tombstone too, in that transaction or, when they are many and
	// the store has a single writer (SQLite), in batches after it,
	// between which other writes go on; meanwhile every read presents
	// them as the tombstone's, and the name is taken (ErrBeingDeleted).
	// Its name is free for a new account when AccountDelete returns nil.
	// ErrDeletionUnfinished, with the deletion, if it stopped before
	// every unit moved; AccountDelete of that name then moves the rest
	// (so does p.Resume). Two calls may move the units of one deletion at
	// once: each moves some, none is moved twice or left.
	// ErrNotFound if there is no such account.
	AccountDelete(ctx context.Context, p AccountDeleteParams) (AccountDeletion, error)
	// AccountDeletions returns the accounts deleted at or after since
	// (Name, Tombstone, DeletedAt), oldest first, while their tombstones
	// are kept (WorkPurge).
	AccountDeletions(ctx context.Context, since time.Time) ([]AccountDeletion, error)
	// AccountsBeingDeleted returns the accounts whose deletion committed
	// with units still to move under their tombstones (AccountDelete: an
	// AccountDelete moving them now, or one that stopped with
	// ErrDeletionUnfinished), by name: Name, Tombstone, DeletedAt, and in
	// Units how many are left to move. None with a store that moves them
	// in the deletion's own transaction (PostgreSQL).
	AccountsBeingDeleted(ctx context.Context) ([]AccountDeletion, error)

	// WorkEnqueue stores a new unit: queued, or already claimed when
	// p.ClaimFor is set (nobody could claim it before). ErrExists if the ID
	// is taken; ErrNotFound if the account does not exist; the existing
	// unit and ErrDuplicate if p.IdempotencyKey was used on the account at
	// or after p.IdempotencySince; unless p.SyncLater, that unit is on disk
	// when it is returned, even if its own enqueue had SyncLater.
	WorkEnqueue(ctx context.Context, p WorkEnqueueParams) (Work, error)
	// WorkByIdempotencyKey returns the unit of account queued with
	// idempotency key key at or after since (what WorkEnqueue would answer
	// ErrDuplicate with), or ErrNotFound.
	WorkByIdempotencyKey(ctx context.Context, account, key string, since time.Time) (Work, error)
	// WorkClaim atomically moves up to p.Max queued units of p.Account whose
	// deadline is after p.Now to claimed, oldest first, each with its own
	// claim id, and returns them. A unit is claimed at most once, ever: the
	// claim is a conditional write on state = 'queued'.
	WorkClaim(ctx context.Context, p WorkClaimParams) ([]Work, error)
	// WorkClaimedByPolls returns the units of p.Account still claimed by
	// p.InstanceID for the polls of run p.Run numbered p.FromPoll to
	// p.ToPoll (ClaimPoll), oldest first. A run without a name (empty
	// p.Run) has none.
	WorkClaimedByPolls(ctx context.Context, p WorkClaimedByPollsParams) ([]Work, error)
	// WorkComplete records the claimer's outcome. It succeeds only while the
	// unit is claimed under p.ClaimID and p.Now is before the deadline.
	// Errors: ErrNotFound; ErrClaimMismatch (claimed under another claim id);
	// ErrNotClaimable (queued, terminal, or past its deadline).
	WorkComplete(ctx context.Context, p WorkCompleteParams) (Work, error)
	// WorkCancel moves a queued or claimed unit to cancelled and returns it,
	// only while p.Now is before its deadline: past it, the unit is due to
	// time out (a caller waiting for it gets the timeout, whoever cancels).
	// A unit already terminal, or past its deadline, is returned unchanged
	// with ErrNotClaimable (NotCancellable).
	WorkCancel(ctx context.Context, p WorkCancelParams) (Work, error)
	// WorkExpire moves the queued and claimed units whose deadline is at
	// or before p.Now to timed_out, earliest deadline first, up to p.Max of
	// them (reason says whether it was ever claimed and by whom), and
	// returns the units it changed, without their sealed command (nothing
	// that acts on a unit timed out reads it, and thousands may be due at
	// once). A unit another call is changing at that moment may be left to
	// a later call (pgstore skips a row locked by another session).
	WorkExpire(ctx context.Context, p WorkExpireParams) ([]Work, error)
	// WorkEndOpen moves queued and claimed units to timed_out whatever
	// their deadline, oldest first, up to p.Max of them, and returns the
	// units it changed, without their sealed command, as WorkExpire. It is for a database restored from a backup: a
	// unit open in the backup may have been claimed and run since, so
	// handing it out again could run it twice (at most once, DESIGN.md).
	WorkEndOpen(ctx context.Context, p WorkEndOpenParams) ([]Work, error)
	// WorkPurge deletes up to p.Max units that ended (succeeded, failed,
	// timed_out, cancelled) and were queued before p.QueuedBefore, oldest
	// first, and returns how many it deleted. An open unit is never
	// deleted, however old; audit records stay. So do the tombstones of
	// deleted accounts until they hold no unit and were deleted before
	// p.QueuedBefore.
	WorkPurge(ctx context.Context, p WorkPurgeParams) (int, error)
	// WorkGet returns a unit by id, or ErrNotFound.
	WorkGet(ctx context.Context, id string) (Work, error)
	// WorkNextDeadline returns the earliest deadline among queued and
	// claimed units; ok is false when there are none.
	WorkNextDeadline(ctx context.Context) (deadline time.Time, ok bool, err error)
	// WorkStates returns the state of each of the given ids that exists
	// and is a unit of account, or of a tombstone of account
	// (DeletedAccount): a unit of another account is left out as if it did
	// not exist.
	WorkStates(ctx context.Context, account string, ids []string) (map[string]State, error)
	// WorkList returns units newest first (by queue time, then id, both
	// descending), filtered and paged by p.
	WorkList(ctx context.Context, p WorkListParams) ([]Work, error)
	// AccountStats returns the queue and instances of every account
	// (or of p.Account alone), ordered by name.
	AccountStats(ctx context.Context, p AccountStatsParams) ([]AccountStats, error)
	// Ping returns nil when the database answers and its schema is at the
	// version this binary knows (every migration applied) or later (a newer
	// replica migrated it: migrations only add): the store is ready to
	// serve. A schema behind is a *SchemaBehindError.
	Ping(ctx context.Context) error

	// InstanceSeen records a poll of an instance (upsert); a poll of an
	// account that no longer exists (deleted meanwhile) is not recorded,
	// nor one of an account deleted and created again under its name since
	// (InstanceSeenParams.AccountCreatedAt), nor one of the run of the
	// stored poll numbered before it (InstanceSeenParams.Run).
	InstanceSeen(ctx context.Context, p InstanceSeenParams) error
	// InstancesSeen records polls of many instances in one transaction,
	// for an automator that keeps its instances' latest polls in memory
	// and writes them in batches. It writes only the records of instances
	// recorded before: a poll of an instance with no record (its record
	// made room for at the account's bound by another instance's poll, on
	// any replica, or deleted) is left out and returned, for the caller to
	// write with InstanceSeen, which checks the bound (a batch written
	// back such records past it). A poll older than the one stored
	// for its instance changes nothing, so batches written late or by
	// several replicas never move a record back in time, nor, numbered
	// before the stored poll of their run, back in its run. A poll of that
	// run numbered after it is newer, even earlier on the clock (a step
	// back of the automator's clock): the record follows the clock. Polls
	// of accounts that no longer exist, or are not the account polled
	// (AccountCreatedAt), are left out, as by InstanceSeen, and not
	// returned.
	InstancesSeen(ctx context.Context, ps []InstanceSeenParams) (unrecorded []InstanceSeenParams, err error)
	// InstanceList returns the instances of an account, ordered by id
	// (byte by byte), each with the number of the account's units it has
	// claimed that have not ended (Instance.InFlight), read in the same
	// statement from the index of claimed units: a few rows, however many
	// units ended.
	InstanceList(ctx context.Context, account string) ([]Instance, error)
	// InstancePurge deletes the records of the instances whose latest poll
	// is older than p.PolledBefore, and returns how many. An instance that
	// polls again is recorded again, as a new one is.
	InstancePurge(ctx context.Context, p InstancePurgeParams) (int, error)

	// ReplicaHeartbeat records that a replica is alive (upsert by
	// ReplicaID: a restart under the same id replaces its row).
	ReplicaHeartbeat(ctx context.Context, p ReplicaHeartbeatParams) error
	// ReplicaList returns every replica that sent a heartbeat and was not
	// purged since, ordered by id.
	ReplicaList(ctx context.Context) ([]Replica, error)
	// ReplicaPurge deletes the rows of the replicas whose last heartbeat
	// is older than p.SeenBefore and returns how many it deleted.
	ReplicaPurge(ctx context.Context, p ReplicaPurgeParams) (int, error)

	// APIKeyCreate stores a new API key; ErrExists if the ID is taken,
	// ErrNotFound if an account of its scope does not exist (checked in
	// the transaction that stores it, so that no key escapes an
	// AccountDelete committed meanwhile).
	APIKeyCreate(ctx context.Context, p APIKeyCreateParams) (APIKey, error)
	// APIKeyGetByHash returns the key whose secret hashes to h, or ErrNotFound.
	APIKeyGetByHash(ctx context.Context, h []byte) (APIKey, error)

	// Rotation, API key scopes and revocation, the audit log and the queue
	// cap (types in security.go).

	// AccountGetByToken returns the account whose current token hashes to
	// p.TokenHash, or whose previous token does while its overlap window is
	// open (p.Now before its end). A previous token past its window gives
	// the account with ErrExpired; an unknown hash ErrNotFound.
	AccountGetByToken(ctx context.Context, p AccountGetByTokenParams) (Account, error)
	// AccountRotate replaces the token, the key or both of an account in
	// one transaction; what it replaces stays valid until p.PreviousUntil.
	// ErrNotFound if there is no such account; ErrExists if p.KeyID is not
	// above every key id the account has had, or p.TokenHash is a token
	// already.
	AccountRotate(ctx context.Context, p AccountRotateParams) (Account, error)
	// AccountKeys returns every key version of an account, the current one
	// first, then the previous ones newest first; ErrNotFound if there is
	// no such account. Previous keys no unit needs any more may be gone
	// (AccountKeysPurge).
	AccountKeys(ctx context.Context, account string) ([]AccountKey, error)
	// AccountKeysPurge deletes the previous keys (never a current one)
	// whose overlap ended more than p.Grace before p.Now and whose account
	// has no unit, in any state, queued before that time (UsableUntil plus
	// p.Grace), and returns how many it deleted. Every unit whose command
	// or result is sealed with a previous key was queued before it: a unit
	// is sealed with the key that is current when it is queued, and handed
	// sealed again with a previous key, whose result the proxy seals with
	// it too, only while that key is usable; p.Grace covers what an
	// automator's caches and its clock may lag. So a deleted key opens no
	// stored unit. SQLite overwrites the sealed key before it deletes the
	// row, as AccountDelete does.
	AccountKeysPurge(ctx context.Context, p AccountKeysPurgeParams) (int, error)
	// APIKeyList returns every API key, revoked ones included, oldest first.
	APIKeyList(ctx context.Context) ([]APIKey, error)
	// APIKeyRevoke marks a key revoked and returns it; a key revoked
	// already is returned unchanged (its first RevokedAt). ErrNotFound.
	APIKeyRevoke(ctx context.Context, p APIKeyRevokeParams) (APIKey, error)
	// AuditAppend adds an event to the audit log and returns it with its
	// Seq. The log is append-only: no method changes or removes an event,
	// and the backends refuse UPDATE and DELETE of its rows.
	AuditAppend(ctx context.Context, e AuditEvent) (AuditEvent, error)
	// AuditList returns events in the order they were appended (by Seq).
	AuditList(ctx context.Context, p AuditListParams) ([]AuditEvent, error)
	// AuditPurge deletes at most p.Max of the events stamped more than
	// p.Retention ago (AuditPurgeParams says by which clock), oldest
	// first, in one transaction, and returns how many. Before it deletes
	// any, it records the time it deletes before (the database refuses
	// the deletion of any event stamped at or after the latest recorded,
	// and a record within a day of its now), with p.Audit appended when
	// that time is later than any recorded. The newest event is never
	// deleted, so seqs are never handed out twice.
	AuditPurge(ctx context.Context, p AuditPurgeParams) (int, error)
	// WorkQueuedCount counts the queued units of an account, stopping at
	// atMost (so the cost is bounded); atMost <= 0 counts them all.
	WorkQueuedCount(ctx context.Context, account string, atMost int) (int, error)

	// Dashboard sessions ended by sign-out (types in security.go). A
	// session is a signed cookie any replica accepts until it expires;
	// these records let every replica sharing the database refuse it once
	// it was signed out.

	// DashboardSessionEnd records that session p.ID was signed out, with
	// p.Audit in the same transaction. Ending it again changes nothing and
	// appends no second record.
	DashboardSessionEnd(ctx context.Context, p DashboardSessionEndParams) error
	// DashboardSessionEnded reports whether session id was signed out (and
	// its record not purged yet).
	DashboardSessionEnded(ctx context.Context, id string) (bool, error)
	// DashboardSessionPurge deletes the records of sessions that expired
	// before p.ExpiredBefore and returns how many it deleted.
	DashboardSessionPurge(ctx context.Context, p DashboardSessionPurgeParams) (int, error)
	// DashboardSessionEndList returns the sign-outs recorded (and not
	// purged) of sessions that expire after expiresAfter (zero: all), as
	// DashboardSessionEnd took them, by expiry then id: for a restore, which
	// records again in the restored database the sign-outs made after its
	// backup was taken.
	DashboardSessionEndList(ctx context.Context, expiresAfter time.Time) ([]DashboardSessionEndParams, error)

	Close() error
}
