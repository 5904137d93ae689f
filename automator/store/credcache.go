package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// CredentialTTL is how long a running automator may answer a credential
// lookup from memory. Every call is authenticated, so without a cache each
// one costs a store read: at load that was the largest share of the
// automator's CPU after the queue writes themselves.
const CredentialTTL = time.Second

// maxCachedCredentials bounds each of the caches; past it, expired
// entries are dropped, and if none is, the whole cache.
const maxCachedCredentials = 4096

// CachedCredentials returns st with its credential lookups (AccountGetByToken,
// APIKeyGetByHash, and AccountGet, which gives an account's current key)
// served from memory for up to ttl after the store read that produced them.
// Only lookups that found something are kept, so a new account, token or
// API key works at once.
//
// The cache stays exact for whoever withdraws a credential through a
// store made by CachedCredentials with the same ttl, in this process or in
// any other sharing the database (the CLI, other replicas): AccountRotate
// (a new token, key or both), AccountDelete and APIKeyRevoke drop this
// process's copies, and return only ttl after their commit, when every
// copy read before the commit has expired (a copy's age counts from before
// its read began). So "a revoked key is
// refused from the next call on" holds for every call made after the
// command returned, on every automator, and a unit queued after rotate-key
// returned is sealed with the new key. A withdrawal that is interrupted
// after its commit (the process dies) takes effect within ttl.
//
// The end of a previous token's overlap window is checked on every lookup,
// cached or not, against p.Now.
func CachedCredentials(st Store, ttl time.Duration) Store {
	return &credCache{
		Store:    st,
		ttl:      ttl,
		accounts: map[string]cached[Account]{},
		byName:   map[string]cached[Account]{},
		apiKeys:  map[string]cached[APIKey]{},
	}
}

type cached[T any] struct {
	v  T
	at time.Time // taken before the read began (monotonic)
}

type credCache struct {
	Store
	ttl time.Duration

	mu sync.RWMutex
	// gen counts this process's withdrawals: a lookup keeps what it read
	// only if no withdrawal began meanwhile.
	gen      uint64
	accounts map[string]cached[Account] // by token hash
	byName   map[string]cached[Account] // by name
	apiKeys  map[string]cached[APIKey]  // by secret hash
}

// Uncached returns the store beneath the cache.
func (c *credCache) Uncached() Store { return c.Store }

// Uncached returns the store beneath a CachedCredentials cache, or st.
func Uncached(st Store) Store {
	if c, ok := st.(interface{ Uncached() Store }); ok {
		return c.Uncached()
	}
	return st
}

func (c *credCache) AccountGetByToken(ctx context.Context, p AccountGetByTokenParams) (Account, error) {
	a, err := lookup(c, &c.accounts, string(p.TokenHash), func() (Account, error) { return c.Store.AccountGetByToken(ctx, p) })
	if err != nil {
		return a, err
	}
	if until := a.PreviousTokenUntil; !until.IsZero() && !p.Now.Before(until) {
		return a, fmt.Errorf("getting account by token: account %q: %w", a.Name, ErrExpired)
	}
	return a, nil
}

func (c *credCache) AccountGet(ctx context.Context, name string) (Account, error) {
	return lookup(c, &c.byName, name, func() (Account, error) { return c.Store.AccountGet(ctx, name) })
}

func (c *credCache) APIKeyGetByHash(ctx context.Context, h []byte) (APIKey, error) {
	return lookup(c, &c.apiKeys, string(h), func() (APIKey, error) { return c.Store.APIKeyGetByHash(ctx, h) })
}

// lookup answers key from *m while its copy is fresh; otherwise it reads
// it and keeps what it found, unless a withdrawal began meanwhile (after
// pruning a full cache).
func lookup[T any](c *credCache, m *map[string]cached[T], key string, read func() (T, error)) (T, error) {
	c.mu.RLock()
	e, ok := (*m)[key]
	gen := c.gen
	c.mu.RUnlock()
	if ok && time.Since(e.at) < c.ttl {
		return e.v, nil
	}
	at := time.Now()
	v, err := read()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		if len(*m) >= maxCachedCredentials {
			*m = pruned(*m, c.ttl)
		}
		(*m)[key] = cached[T]{v: v, at: at}
	}
	return v, nil
}

func pruned[T any](m map[string]cached[T], ttl time.Duration) map[string]cached[T] {
	for k, e := range m {
		if time.Since(e.at) >= ttl {
			delete(m, k)
		}
	}
	if len(m) >= maxCachedCredentials {
		return map[string]cached[T]{}
	}
	return m
}

// forget drops every cached credential and makes lookups under way keep
// nothing.
func (c *credCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.accounts)
	clear(c.byName)
	clear(c.apiKeys)
}

// withdrawn waits out the other processes' copies: each was read before
// the commit that just returned, so it expires within ttl from now.
func (c *credCache) withdrawn(ctx context.Context) error {
	c.forget()
	t := time.NewTimer(c.ttl)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (they do within %v): %w", ErrWithdrawalInterrupted, c.ttl, ctx.Err())
	}
}

func (c *credCache) AccountRotate(ctx context.Context, p AccountRotateParams) (Account, error) {
	return withdraw(ctx, c, func() (Account, error) { return c.Store.AccountRotate(ctx, p) })
}

// AccountDelete withdraws every credential of the account (its tokens, and
// the API keys it revokes) as AccountRotate does.
func (c *credCache) AccountDelete(ctx context.Context, p AccountDeleteParams) (AccountDeletion, error) {
	return withdraw(ctx, c, func() (AccountDeletion, error) { return c.Store.AccountDelete(ctx, p) })
}

// ForgetCredentials drops the credentials a CachedCredentials store holds
// in memory, so its next lookups read the store: for an automator that
// learns of a withdrawal made by another process (an account deleted) and
// acts on it before that process's wait is over. It finds the cache through
// wrappers that give the store they wrap (Unwrap() Store, as the metrics'
// timing wrapper does); a store without one is left alone.
func ForgetCredentials(st Store) {
	for st != nil {
		if c, ok := st.(*credCache); ok {
			c.forget()
			return
		}
		w, ok := st.(interface{ Unwrap() Store })
		if !ok {
			return
		}
		st = w.Unwrap()
	}
}

func (c *credCache) APIKeyRevoke(ctx context.Context, p APIKeyRevokeParams) (APIKey, error) {
	return withdraw(ctx, c, func() (APIKey, error) { return c.Store.APIKeyRevoke(ctx, p) })
}

// withdraw runs a change that withdraws a credential: it drops this
// process's copies before it and, once it committed, waits the others out
// (an account deletion that is unfinished is committed too).
func withdraw[T any](ctx context.Context, c *credCache, change func() (T, error)) (T, error) {
	c.forget()
	v, err := change()
	if err != nil && !errors.Is(err, ErrDeletionUnfinished) {
		return v, err
	}
	return v, errors.Join(err, c.withdrawn(ctx))
}
