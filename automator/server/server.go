// Package server implements the automator's two gRPC services on top of a
// store.Store: ProxyService (Poll, Complete, CompleteBatch) for proxy
// instances and AutomatorService (ExecuteOnProxy, Submit, Wait, Get,
// Cancel, ListInstances) for callers.
//
// The queue semantics live here: commands are sealed for their account
// before they are stored, claims are the store's atomic conditional write,
// a sweeper ends every unit at its deadline, and in-process wake-ups (hub)
// complete long polls and waiting callers without polling the store.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/loglimit"
)

// Clock tells the time. Deadlines are computed on the automator's clock
// only (guarantee 6); tests inject their own.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Options configure a Server. Zero values take the defaults noted.
type Options struct {
	Store     store.Store
	MasterKey crypto.MasterKey
	// DefaultTimeout applies to units whose caller gives none (5 minutes).
	DefaultTimeout time.Duration
	// MaxTimeout bounds a caller's timeout (24 hours).
	MaxTimeout time.Duration
	// IdempotencyRetention is how long an idempotency key stays bound to
	// the unit it made (24 hours): a repeated submit with the key within it
	// returns that unit; after it, the key makes a new unit.
	IdempotencyRetention time.Duration
	// PollWindow is the longest a Poll waits before returning empty (30 s).
	// A proxy may ask for less.
	PollWindow time.Duration
	// SweepInterval bounds how long the sweeper sleeps between looks at the
	// next deadline (1 s), which matters only for units other replicas
	// queued. It is also how often deleted accounts are looked for
	// (deleted.go), and how soon a failed sweep or a lost Broadcaster's
	// Listen is tried again.
	SweepInterval time.Duration
	// SweepTimeout bounds each store call of the sweeper and of the watch
	// for deleted accounts (30 s): one the database never answers (its
	// connection cut off without a word) would otherwise stop them until
	// the operating system gives the connection up, a quarter of an hour
	// on Linux.
	SweepTimeout time.Duration
	// WaitRecheck is, with a Broadcaster, how often a waiting caller's
	// unit is read again (30 s): an end on another replica whose
	// announcement was lost (its NOTIFY failed while both stayed up)
	// reaches the caller within it, not at the unit's deadline.
	WaitRecheck time.Duration
	Limits      Limits
	// Broadcaster carries queue events to other replicas sharing the store;
	// nil for a single automator.
	Broadcaster Broadcaster
	// Metrics observes the queue (package metrics); nil for none.
	Metrics Metrics
	// Silence, when set, returns for a call's peer address a function
	// telling how long ago its connection last delivered anything (nil:
	// not known; package lastread). A unit is handed to a waiting poll
	// whose connection was heard from lately rather than to one silent
	// for longer than a proxy's keepalive allows (quietAfter): that one's
	// host may have lost power, and a unit handed to it would wait for
	// its deadline.
	Silence func(peer net.Addr) func() time.Duration
	// Repair says, in the log's lines of a damaged database, what its
	// operator does about it (automator repair, for SQLite); empty: the
	// line says nothing of it.
	Repair string
	Clock  Clock
	Logger *slog.Logger
}

// Limits bound what a caller may submit, and what abuse may cost.
type Limits struct {
	MaxScriptName int // bytes (255)
	MaxArgs       int // count (1024)
	MaxArgsBytes  int // all arguments together (256 KiB)
	MaxEnv        int // variables (256)
	MaxEnvBytes   int // all names and values together (64 KiB)
	MaxStdin      int // bytes (1 MiB)
	// MaxQueuedPerAccount bounds the queued (unclaimed) units of one
	// account (10,000): a caller flooding an account whose proxies are
	// down or slow gets ResourceExhausted, and other accounts are served.
	MaxQueuedPerAccount int
	// MaxInstancesPerAccount bounds the instance records of one account
	// (20,000), so one account's token cannot fill the database, nor slow
	// every account's listings and metrics: at it, a poll of a new
	// instance id takes the place of the record of an instance offline,
	// and is refused with ResourceExhausted, not recorded, when every one
	// is online.
	MaxInstancesPerAccount int
	// FailedAuthBurst failed authentications from one source address
	// (30), then one more every FailedAuthRefill (2 s), before further
	// failures get ResourceExhausted. Successful calls never count.
	FailedAuthBurst  int
	FailedAuthRefill time.Duration
}

// JSONBodyBound is the most bytes the largest command within l can take
// as the JSON body of an HTTP/JSON execute or submit, every character
// escaped as JSON lets a client escape it: stdin as base64, each '/' of
// it as "\/" (2 bytes a character); each byte of the script name, an
// argument or a variable as "\u003c" (6); each argument and variable
// with its quotes, separator and a line of deep indentation (32); and 64 KiB
// for the rest (the other fields, white space). The HTTP listener reads
// no more of a body: the 16 MiB of two gRPC messages let one API key make
// the automator hold some 44 MB for each body it sent at once, refused
// only once decoded (a review).
func (l Limits) JSONBodyBound() int64 {
	l.applyDefaults()
	base64 := 4 * ((int64(l.MaxStdin) + 2) / 3)
	return 2*base64 + 6*int64(l.MaxScriptName+l.MaxArgsBytes+l.MaxEnvBytes) + 32*int64(l.MaxArgs+l.MaxEnv) + 64<<10
}

func (l *Limits) applyDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxScriptName, 255)
	def(&l.MaxArgs, 1024)
	def(&l.MaxArgsBytes, 256<<10)
	def(&l.MaxEnv, 256)
	def(&l.MaxEnvBytes, 64<<10)
	def(&l.MaxStdin, 1<<20)
	def(&l.MaxQueuedPerAccount, 10_000)
	def(&l.MaxInstancesPerAccount, 20_000)
	def(&l.FailedAuthBurst, 30)
	if l.FailedAuthRefill <= 0 {
		l.FailedAuthRefill = 2 * time.Second
	}
}

// Server holds the state both services share.
type Server struct {
	store          store.Store
	master         crypto.MasterKey
	defaultTimeout time.Duration
	maxTimeout     time.Duration
	retention      time.Duration
	pollWindow     time.Duration
	sweepInterval  time.Duration
	sweepTimeout   time.Duration
	// listening: the Broadcaster listens (Listening).
	listening   atomic.Bool
	waitRecheck time.Duration
	limits      Limits
	clock       Clock
	// purgePause waits between two batches of PurgeEnded (pause; a test
	// records the waits instead).
	purgePause  func(ctx context.Context, d time.Duration) error
	silence     func(net.Addr) func() time.Duration
	log         *slog.Logger
	hub         *hub
	seen        seenCache
	sharedIDs   sharedIDs // runs polling as one instance (sharedid.go)
	broadcaster Broadcaster
	metrics     Metrics
	started     time.Time       // when New made it (deleted.go)
	failures    *failureLimiter // budget of failed authentications per source (ratelimit.go)
	results     resultGuard     // accounts whose results are read before they are written (resultguard.go)
	// calls without a credential open per source (TapHandle)
	uncredentialed openCalls
	authFailLog    *loglimit.Limiter // the log lines of failed authentications (authlog.go)
	authMetrics    AuthMetrics       // the Metrics, when it counts failed authentications
	dbDown         atomic.Bool       // the database is out of reach, since a store call found it so (unreachable.go)
	dbDownSince    atomic.Int64      // when dbDown was last set (UnixNano)
	dbWarned       atomic.Bool       // the outage under way was logged as one (databaseUnreachable)
	dbFailures     atomic.Uint64     // store calls that found the database out of reach

	// timedOutLog, diskFullLog and damagedLog bound the lines of units
	// timed out, of store calls refused for lack of disk space, and of
	// those that met a damaged database (loglines.go).
	timedOutLog, diskFullLog, damagedLog *loglimit.Limiter
	// lockedLog and internalLog bound the lines of calls that found the
	// database locked by another program, and of other internal errors;
	// unfailedLog those of units of lost poll answers not failed.
	lockedLog, internalLog, unfailedLog *loglimit.Limiter
	ownDamagedLog                       *loglimit.Limiter // the automator's own calls that met a damaged database (storeFailure)
	// diskBackLog and lockBackLog bound the lines saying a full disk, or
	// a lock another program held, is over, apart from those faults'
	// own: the end of a fault is said even when its lines used up their
	// bound (reviews).
	diskBackLog, lockBackLog *loglimit.Limiter
	repair                   string // what to do about a damaged database (Options.Repair)
	// refusedPollLog, queueFullLog and deniedLog bound the lines of polls
	// refused for their keys, units refused for a full queue, and calls of
	// API keys outside their accounts (loglines.go).
	refusedPollLog, queueFullLog, deniedLog *loglimit.Limiter
	// instanceCapLog bounds the lines of polls refused for their account's
	// bound of instance records (MaxInstancesPerAccount).
	instanceCapLog *loglimit.Limiter
	storeMetrics   StoreMetrics   // the Metrics, when it counts failed store calls
	refusalMetrics RefusalMetrics // the Metrics, when it counts refused units and denied calls
	waitMetrics    WaitMetrics    // the Metrics, when it counts the calls waiting for a unit
	diskFull       atomic.Bool    // a write was refused for lack of disk space, and none has succeeded since (loglines.go)
	fullWrites     atomic.Uint64  // writes refused for lack of disk space
	dbLocked       atomic.Bool    // a write found the database locked by another program, and none has succeeded since
	lockedWrites   atomic.Uint64  // writes that found it so

	keysMu sync.Mutex
	keys   map[string]*keyRing // account → its opened keys (keys.go)
	listed *listedCache        // what listings show of units (listed.go)

	kick     chan struct{} // wakes the sweeper when an earlier deadline arrives
	queued   queuedCounts  // recent queue counts (checkQueue)
	kickMu   sync.Mutex
	kickAt   time.Time     // the earliest deadline kicked and not yet taken
	shutdown chan struct{} // closed by Shutdown: polls and waits return
	stopOnce sync.Once

	// testHookWindow, when set (tests), ends each poll's window of d when
	// the channel it returns for that poll is ready, in place of a timer.
	testHookWindow func(account, instance string, d time.Duration) <-chan time.Time
	// testHookSweepTimeout, when set (tests), is told of each store call
	// SweepTimeout (d) bounds, in place of a timer: calling expire ends
	// the call's context as the bound's passing would.
	testHookSweepTimeout func(d time.Duration, expire func())
}

// New builds a Server. Call Run to start its sweeper.
func New(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("server: Store is required")
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = 5 * time.Minute
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = 24 * time.Hour
	}
	if o.IdempotencyRetention <= 0 {
		o.IdempotencyRetention = 24 * time.Hour
	}
	if o.PollWindow <= 0 {
		o.PollWindow = 30 * time.Second
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Second
	}
	if o.WaitRecheck <= 0 {
		o.WaitRecheck = 30 * time.Second
	}
	if o.SweepTimeout <= 0 {
		o.SweepTimeout = 30 * time.Second
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	o.Limits.applyDefaults()
	am, ok := o.Metrics.(AuthMetrics)
	if !ok {
		am = noAuthMetrics{}
	}
	sm, ok := o.Metrics.(StoreMetrics)
	if !ok {
		sm = noStoreMetrics{}
	}
	rm, ok := o.Metrics.(RefusalMetrics)
	if !ok {
		rm = noRefusalMetrics{}
	}
	wm, ok := o.Metrics.(WaitMetrics)
	if !ok {
		wm = noWaitMetrics{}
	}
	s := &Server{
		store:          o.Store,
		master:         o.MasterKey,
		defaultTimeout: o.DefaultTimeout,
		maxTimeout:     o.MaxTimeout,
		retention:      o.IdempotencyRetention,
		pollWindow:     o.PollWindow,
		sweepInterval:  o.SweepInterval,
		sweepTimeout:   o.SweepTimeout,
		waitRecheck:    o.WaitRecheck,
		limits:         o.Limits,
		clock:          o.Clock,
		purgePause:     pause,
		silence:        o.Silence,
		log:            o.Logger,
		hub:            newHub(),
		broadcaster:    o.Broadcaster,
		failures:       newFailureLimiter(o.Limits.FailedAuthBurst, o.Limits.FailedAuthRefill),
		metrics:        o.Metrics,
		authMetrics:    am,
		storeMetrics:   sm,
		refusalMetrics: rm,
		waitMetrics:    wm,
		started:        o.Clock.Now(),
		keys:           make(map[string]*keyRing),
		listed:         newListedCache(maxListed),
		kick:           make(chan struct{}, 1),
		shutdown:       make(chan struct{}),
	}
	s.authFailLog = newAuthFailLog(o.Logger, o.Clock)
	s.timedOutLog, s.diskFullLog = newTimedOutLog(o.Logger, o.Clock), newDiskFullLog(o.Logger, o.Clock)
	s.diskBackLog = newBackLog(o.Logger, o.Clock, "the database took writes again after its disk was full, not logged one by one")
	s.lockBackLog = newBackLog(o.Logger, o.Clock, "the database took writes again after another program held it locked, not logged one by one")
	s.lockedLog, s.internalLog = newLockedLog(o.Logger, o.Clock), newInternalLog(o.Logger, o.Clock)
	s.unfailedLog = newUnfailedLog(o.Logger, o.Clock)
	s.damagedLog, s.repair = newDamagedLog(o.Logger, o.Clock, "of callers and proxies", o.Repair), o.Repair
	s.ownDamagedLog = newDamagedLog(o.Logger, o.Clock, "of the automator's own (the sweeper's, the instances', the audit log's)", o.Repair)
	s.refusedPollLog, s.queueFullLog, s.deniedLog = newRefusedPollLog(o.Logger, o.Clock), newQueueFullLog(o.Logger, o.Clock), newDeniedLog(o.Logger, o.Clock)
	s.instanceCapLog = newInstanceCapLog(o.Logger, o.Clock)
	return s, nil
}

// Shutdown makes pending polls return empty and waiting callers return
// Unavailable (they wait again by id on another connection), so a graceful
// gRPC stop does not hang on long polls.
func (s *Server) Shutdown() {
	s.stopOnce.Do(func() { close(s.shutdown) })
}

// ShuttingDown reports whether Shutdown was called.
func (s *Server) ShuttingDown() bool {
	select {
	case <-s.shutdown:
		return true
	default:
		return false
	}
}

// newID returns prefix + 32 hex characters of randomness.
func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return prefix + hex.EncodeToString(b[:])
}

// pollTick is the grid on which the windows of long polls end. With many
// idle instances the automator then answers the polls whose windows end,
// and hears the polls that follow them and the instances' keepalive pings
// (10 and 20 s after the answer), in bursts a few times a second instead of
// one at a time: on an idle machine, waking the process costs more than the
// work it is woken for. With 10,000 idle instances on the development
// machine the automator used 26-28 % of a core with windows ending at
// random, 17-18 % with this grid (docs/performance.md).
const pollTick = 250 * time.Millisecond

// onTick lengthens a window d that starts at now so that it ends on a
// multiple of pollTick, by less than one tick. Windows shorter than 20
// ticks are kept as they are: for them a tick would be a long delay.
func onTick(now time.Time, d time.Duration) time.Duration {
	if d < 20*pollTick {
		return d
	}
	if r := time.Duration(now.Add(d).UnixNano() % int64(pollTick)); r > 0 {
		d += pollTick - r
	}
	return d
}

// jitter spreads d by up to +10% so pollers of one account drift apart.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration(mrand.Int64N(int64(d)/10+1))
}
