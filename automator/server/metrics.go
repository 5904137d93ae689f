package server

import (
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// Metrics observes the queue changes this automator makes, for
// instrumentation (package metrics implements it). Its calls must be cheap
// and must not block: they run on the request paths.
type Metrics interface {
	// WorkQueued: a unit was queued on account.
	WorkQueued(account string)
	// WorkClaimed: a unit of account was claimed after waiting in the queue.
	WorkClaimed(account string, waited time.Duration)
	// WorkFinished: w reached its terminal state (w.State) here.
	WorkFinished(w store.Work)
	// WorkUndelivered: a unit of account failed because its claim never
	// reached its proxy (after WorkFinished).
	WorkUndelivered(account string)
	// PollOpened: a poll of account began; the function returned ends it.
	PollOpened(account string) (closed func())
}

// AccountMetrics is implemented by Metrics that keep series per account
// (package metrics does).
type AccountMetrics interface {
	// AccountDeleted: account was deleted and is no account again; the
	// gauges of its polls and waits open here may go (they were woken).
	AccountDeleted(account string)
	// AccountGone: account was deleted more than forgetDeletedAfter ago and
	// is no account again; its series may go.
	AccountGone(account string)
}

// StoreMetrics is implemented by a Metrics that also counts the store
// calls that failed (package metrics does).
type StoreMetrics interface {
	// StoreFailed: a store call failed with an error of kind (one of the
	// StoreError constants).
	StoreFailed(kind string)
}

// RefusalMetrics is implemented by a Metrics that also counts the calls
// refused before they did anything, which the log bounds to 20 lines a
// minute and the audit log records (package metrics does).
type RefusalMetrics interface {
	// WorkRefused: a unit of account was refused because the account had
	// limits.max_queued_per_account units queued.
	WorkRefused(account string)
	// AuthDenied: a call was refused because its API key may not use the
	// account it named.
	AuthDenied()
	// ResultRefused: a result a proxy of account posted was refused
	// because its sealed result did not open.
	ResultRefused(account string)
}

// WaitMetrics is implemented by a Metrics that also counts the calls
// waiting for a unit to end (package metrics does).
type WaitMetrics interface {
	// WaitOpened: a call (ExecuteOnProxy, Wait) began waiting for a unit
	// of account that has not ended; the function returned ends it.
	WaitOpened(account string) (closed func())
}

// The kinds of store errors StoreMetrics counts.
const (
	// StoreErrorUnavailable: the database was out of reach (PostgreSQL
	// restarting, failing over, cut off; a call that got no answer).
	StoreErrorUnavailable = "unavailable"
	// StoreErrorStorageFull: the database is out of disk space.
	StoreErrorStorageFull = "storage_full"
	// StoreErrorDamaged: the database is damaged (store.IsDamaged).
	StoreErrorDamaged = "damaged"
	// StoreErrorLocked: another program held the database locked past
	// the store's wait (store.IsLocked).
	StoreErrorLocked = "locked"
	// StoreErrorOther: any other failure (an internal error).
	StoreErrorOther = "other"
)

type noMetrics struct{}

func (noMetrics) WorkQueued(string)                 {}
func (noMetrics) WorkClaimed(string, time.Duration) {}
func (noMetrics) WorkFinished(store.Work)           {}
func (noMetrics) WorkUndelivered(string)            {}
func (noMetrics) PollOpened(string) func()          { return func() {} }

type noAuthMetrics struct{}

func (noAuthMetrics) AuthFailed(bool) {}

type noStoreMetrics struct{}

type noRefusalMetrics struct{}

func (noRefusalMetrics) WorkRefused(string)   {}
func (noRefusalMetrics) AuthDenied()          {}
func (noRefusalMetrics) ResultRefused(string) {}

type noWaitMetrics struct{}

func (noWaitMetrics) WaitOpened(string) func() { return func() {} }

func (noStoreMetrics) StoreFailed(string) {}

// storeFailure counts and logs a store call that failed with err where no
// caller is told of it (the sweeper's, the instances' polls, the audit
// log's records of refusals): with the database out of reach, once per
// outage; out of disk space, damaged or locked by another program, within
// those faults' bounds of lines, saying what to do (a review: a lock's
// were bare errors, some every 5 s, while it lasted); anything else, an
// error.
func (s *Server) storeFailure(doing string, err error, attrs ...any) {
	s.storeFailed(err)
	attrs = append(attrs, "err", err)
	switch {
	case store.IsUnavailable(err):
		s.databaseUnreachable(append([]any{"doing", doing}, attrs...)...)
	case store.IsStorageFull(err):
		s.diskFullLog.Log(doing, attrs...)
	case store.IsDamaged(err):
		s.damagedOn(s.ownDamagedLog, doing, attrs...)
	case store.IsLocked(err):
		s.lockedLog.Log(lockedHelp, append([]any{"doing", doing}, attrs...)...)
	default:
		s.log.Error(doing, attrs...)
	}
}

// LogStoreFailure is storeFailure for the writes serve makes of its own
// (the hourly purges, the replica's heartbeat): counted, and logged
// within the bounds of their fault's lines, saying what to do (a review:
// a lock's were bare errors).
func (s *Server) LogStoreFailure(doing string, err error, attrs ...any) {
	s.storeFailure(doing, err, attrs...)
}

// storeFailed tells the metrics of a store call that failed with err.
func (s *Server) storeFailed(err error) {
	switch {
	case store.IsUnavailable(err):
		s.storeMetrics.StoreFailed(StoreErrorUnavailable)
	case store.IsStorageFull(err):
		s.fullWrites.Add(1)
		s.diskFull.Store(true)
		s.storeMetrics.StoreFailed(StoreErrorStorageFull)
	case store.IsDamaged(err):
		s.storeMetrics.StoreFailed(StoreErrorDamaged)
	case store.IsLocked(err):
		s.lockedWrites.Add(1)
		s.dbLocked.Store(true)
		s.storeMetrics.StoreFailed(StoreErrorLocked)
	default:
		s.storeMetrics.StoreFailed(StoreErrorOther)
	}
}
