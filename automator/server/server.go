// Package server implements the automator's two gRPC services on top of a
// store.Store: ProxyService (Poll, Complete) for proxy instances and
// AutomatorService (ExecuteOnProxy, Submit, Wait, Get, Cancel,
// ListInstances) for callers.
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
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
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
	// next deadline (1 s); it matters only for units other replicas queued.
	SweepInterval time.Duration
	Limits        Limits
	// Broadcaster carries queue events to other replicas sharing the store;
	// nil for a single automator.
	Broadcaster Broadcaster
	// Metrics observes the queue (package metrics); nil for none.
	Metrics Metrics
	Clock   Clock
	Logger  *slog.Logger
}

// Limits bound what a caller may submit.
type Limits struct {
	MaxScriptName int // bytes (255)
	MaxArgs       int // count (1024)
	MaxArgsBytes  int // all arguments together (256 KiB)
	MaxEnv        int // variables (256)
	MaxEnvBytes   int // all names and values together (64 KiB)
	MaxStdin      int // bytes (1 MiB)
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
	limits         Limits
	clock          Clock
	log            *slog.Logger
	hub            *hub
	seen           seenCache
	broadcaster    Broadcaster
	metrics        Metrics

	keysMu sync.Mutex
	keys   map[string]crypto.Keys // account → opened keys

	kick     chan struct{} // wakes the sweeper when an earlier deadline arrives
	shutdown chan struct{} // closed by Shutdown: polls and waits return
	stopOnce sync.Once
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
	return &Server{
		store:          o.Store,
		master:         o.MasterKey,
		defaultTimeout: o.DefaultTimeout,
		maxTimeout:     o.MaxTimeout,
		retention:      o.IdempotencyRetention,
		pollWindow:     o.PollWindow,
		sweepInterval:  o.SweepInterval,
		limits:         o.Limits,
		clock:          o.Clock,
		log:            o.Logger,
		hub:            newHub(),
		broadcaster:    o.Broadcaster,
		metrics:        o.Metrics,
		keys:           make(map[string]crypto.Keys),
		kick:           make(chan struct{}, 1),
		shutdown:       make(chan struct{}),
	}, nil
}

// Shutdown makes pending polls return empty and waiting callers return
// Unavailable (they wait again by id on another connection), so a graceful
// gRPC stop does not hang on long polls.
func (s *Server) Shutdown() {
	s.stopOnce.Do(func() { close(s.shutdown) })
}

// accountKeys returns the opened keys of an account, caching them.
func (s *Server) accountKeys(ctx context.Context, account string) (crypto.Keys, error) {
	s.keysMu.Lock()
	ks, ok := s.keys[account]
	s.keysMu.Unlock()
	if ok {
		return ks, nil
	}
	a, err := s.store.AccountGet(ctx, account)
	if err != nil {
		return nil, err
	}
	k, err := s.master.OpenKey(a.Name, a.SealedKey)
	if err != nil {
		return nil, fmt.Errorf("opening key of account %q with the master key: %w", account, err)
	}
	ks = crypto.Keys{k}
	s.keysMu.Lock()
	s.keys[account] = ks
	s.keysMu.Unlock()
	return ks, nil
}

// currentKey is the key new units of account are sealed with.
func (s *Server) currentKey(ctx context.Context, account string) (crypto.Key, error) {
	ks, err := s.accountKeys(ctx, account)
	if err != nil {
		return crypto.Key{}, err
	}
	cur := ks[0]
	for _, k := range ks[1:] {
		if k.ID > cur.ID {
			cur = k
		}
	}
	return cur, nil
}

// newID returns prefix + 32 hex characters of randomness.
func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return prefix + hex.EncodeToString(b[:])
}

// jitter spreads d by up to +10% so pollers of one account drift apart.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration(mrand.Int64N(int64(d)/10+1))
}
