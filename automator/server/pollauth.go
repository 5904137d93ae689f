package server

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// A poll waits up to its window, about 30 s, with the token it was
// authenticated with; `rotate-token --overlap 0` may withdraw that token
// meanwhile. Checking it again on every unit would read the store under
// the hub's lock, and checking it on a timer would cost 10,000 idle polls
// their reads. Instead a waiting poll is checked where it could get a unit:
//
//   - handed one by an enqueue (hub.reserve): the enqueue read the account
//     (AccountGet, for its key) and passes its current token hash; a poll
//     whose authentication saw another one is passed over, as a rotation
//     was made since. The credential cache (store.CachedCredentials) makes
//     that read no older than a rotation that returned before the enqueue
//     began, in every process sharing the store.
//   - claiming one itself after a wake-up: it looks its token up again,
//     through the same cache, before it claims (recheckToken). A token
//     withdrawn, or past its overlap, ends the poll with Unauthenticated,
//     as the interceptor would; a token that became a previous one works
//     until its overlap ends, as one presented as such does.

// pollToken is what a waiting poll knows of the token that authenticated
// it, renewed by every recheckToken. Its accepts check reads it under the
// hub's lock; mu nests in that lock.
type pollToken struct {
	hash []byte // SHA-256 of the token the poll presented

	mu      sync.Mutex
	current []byte    // the account's current token hash, as last read (proxyToken)
	until   time.Time // the end of its overlap, if a previous token; else zero
}

func newPollToken(t proxyToken) *pollToken {
	return &pollToken{hash: t.hash, current: t.current, until: t.until}
}

// takes reports whether a poll with this token may be handed a unit at
// now, by an enqueue that read the account's current token hash current
// (nil: not known, as for a wake-up).
func (t *pollToken) takes(now time.Time, current []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.expiredLocked(now) && (current == nil || bytes.Equal(current, t.current))
}

// expired reports whether the token is a previous one whose overlap has
// ended by now.
func (t *pollToken) expired(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expiredLocked(now)
}

func (t *pollToken) expiredLocked(now time.Time) bool {
	return !t.until.IsZero() && !now.Before(t.until)
}

func (t *pollToken) renew(a store.Account) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.current, t.until = a.TokenHash, a.PreviousTokenUntil
}

// recheckToken looks up again the token of a poll woken to claim, before
// it claims: a rotation made while it waited applies to it. A token
// withdrawn, or past its overlap (a rotation without overlap makes the
// token it replaces so at once), is refused (Unauthenticated, audited,
// counted against the source as a refused call is), in the interceptor's
// words for it.
func (s *Server) recheckToken(ctx context.Context, account string, t *pollToken) error {
	a, err := s.store.AccountGetByToken(ctx, store.AccountGetByTokenParams{TokenHash: t.hash, Now: s.clock.Now()})
	switch {
	case errors.Is(err, store.ErrNotFound):
		// The caller gets the interceptor's words; the audit log also
		// names the account the token was withdrawn from.
		return s.authFailed(ctx, proxyPrefix+"Poll", "invalid account token", "account:"+account)
	case errors.Is(err, store.ErrExpired):
		return s.authFailed(ctx, proxyPrefix+"Poll", tokenExpired, "account:"+account)
	case err != nil:
		return s.internal(ctx, "looking up account token", err)
	}
	t.renew(a)
	return nil
}
