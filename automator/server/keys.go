package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
)

// keyCacheTTL bounds how long a cached key ring is trusted before it is
// read again. A rotation is seen sooner in every case that matters: an
// enqueue reads the account's current key id, and a blob or an instance
// naming an unknown key id makes the ring be read again.
const keyCacheTTL = 30 * time.Second

// reloadUnknownEvery bounds how often ids presented by instances (which a
// token holder controls) may make the ring be read again.
const reloadUnknownEvery = time.Second

// keyRing is an account's key versions as the store had them at loaded:
// the current key first, then previous ones newest first. Previous keys
// that no unit needs any more are deleted from the store (purgeKeys): a
// ring read since lacks them, and one read before keeps them until it is
// read again, for units that no longer exist.
type keyRing struct {
	meta   []store.AccountKey
	opened crypto.Keys
	// checks[i] is crypto.KeyCheck of opened[i], computed when the ring is
	// read: polls, which are frequent, compare with it
	// (PollRequest.key_checks).
	checks [][]byte
	loaded time.Time
}

func (r *keyRing) current() crypto.Key { return r.opened[0] }

func (r *keyRing) has(id uint32) bool {
	_, ok := r.opened.Key(id)
	return ok
}

// checkOf returns the key check of the account's key of id; false when the
// ring does not hold id.
func (r *keyRing) checkOf(id uint32) ([]byte, bool) {
	for i, k := range r.opened {
		if k.ID == id && id != 0 {
			return r.checks[i], true
		}
	}
	return nil, false
}

// usable reports whether key id may be handed to proxies at now: the
// current key, or a previous one inside its overlap window.
func (r *keyRing) usable(id uint32, now time.Time) bool {
	for _, k := range r.meta {
		if k.KeyID == id {
			return k.Usable(now)
		}
	}
	return false
}

// newestUsableOf returns the newest key usable at now among ids.
func (r *keyRing) newestUsableOf(ids []uint32, now time.Time) (crypto.Key, bool) {
	for i, k := range r.meta { // newest first
		if k.Usable(now) && slices.Contains(ids, k.KeyID) {
			return r.opened[i], true
		}
	}
	return crypto.Key{}, false
}

// anyUsable reports whether one of the held key ids is usable at now.
func (r *keyRing) anyUsable(ids []uint32, now time.Time) bool {
	_, ok := r.newestUsableOf(ids, now)
	return ok
}

// describe lists the key ids and their windows for error messages.
func (r *keyRing) describe(now time.Time) string {
	var out []string
	for _, k := range r.meta {
		switch {
		case k.Current:
			out = append(out, fmt.Sprintf("%d (current)", k.KeyID))
		case k.Usable(now):
			out = append(out, fmt.Sprintf("%d (until %s)", k.KeyID, k.UsableUntil.UTC().Format(time.RFC3339)))
		}
	}
	return fmt.Sprint(out)
}

// loadRing reads and opens every key version of an account and caches it.
func (s *Server) loadRing(ctx context.Context, account string) (*keyRing, error) {
	meta, err := s.store.AccountKeys(ctx, account)
	if err != nil {
		return nil, err
	}
	r := &keyRing{meta: meta, loaded: s.clock.Now()}
	for _, m := range meta {
		k, err := s.master.OpenKey(account, m.SealedKey)
		if err != nil {
			return nil, fmt.Errorf("opening key %d of account %q with the master key: %w", m.KeyID, account, err)
		}
		if k.ID != m.KeyID {
			return nil, fmt.Errorf("key %d of account %q is stored under id %d", k.ID, account, m.KeyID)
		}
		r.opened = append(r.opened, k)
		r.checks = append(r.checks, crypto.KeyCheck(k))
	}
	s.keysMu.Lock()
	s.keys[account] = r
	s.keysMu.Unlock()
	return r, nil
}

// ring returns the account's keys, from the cache while it is fresh.
func (s *Server) ring(ctx context.Context, account string) (*keyRing, error) {
	s.keysMu.Lock()
	r := s.keys[account]
	s.keysMu.Unlock()
	if r != nil && s.clock.Now().Sub(r.loaded) < keyCacheTTL {
		return r, nil
	}
	return s.loadRing(ctx, account)
}

// ringWith returns the account's keys, read again if the cached ring does
// not hold key id (a rotation it has not seen).
func (s *Server) ringWith(ctx context.Context, account string, id uint32) (*keyRing, error) {
	r, err := s.ring(ctx, account)
	if err != nil || r.has(id) {
		return r, err
	}
	return s.loadRing(ctx, account)
}

// currentKey is the key new units of account acc are sealed with. acc is
// the account as the caller just read it from the store: a cached ring
// older than its current key is read again, and so is one of an account
// deleted since and created again under the same name (sameAccount).
func (s *Server) currentKey(ctx context.Context, acc store.Account) (crypto.Key, error) {
	r, err := s.ringWith(ctx, acc.Name, acc.KeyID)
	if err == nil && !r.sameAccount(acc.KeyID, acc.SealedKey) {
		r, err = s.loadRing(ctx, acc.Name)
	}
	if err != nil {
		return crypto.Key{}, err
	}
	return r.current(), nil
}

// sameAccount reports whether the ring holds key id as sealedKey: if it
// holds another key under that id, the account was deleted and created
// again since the ring was read (an account never gives an id to two keys,
// and its current key stays; only previous keys no unit needs are deleted,
// purgeKeys). A ring that does not hold id says nothing of it.
func (r *keyRing) sameAccount(id uint32, sealedKey []byte) bool {
	for _, k := range r.meta {
		if k.KeyID == id {
			return bytes.Equal(k.SealedKey, sealedKey)
		}
	}
	return true
}

// holds reports whether the ring was read with the account's key of id,
// as sealedKey, among its keys (whether or not it opened): false for a
// ring read before that key was made, or before the account was deleted
// and created again (sameAccount).
func (r *keyRing) holds(id uint32, sealedKey []byte) bool {
	return slices.ContainsFunc(r.meta, func(k store.AccountKey) bool { return k.KeyID == id && bytes.Equal(k.SealedKey, sealedKey) })
}

// open opens a sealed blob of an account's unit with the key its header
// names, reading the keys again if that id is new to the cache.
func (s *Server) open(ctx context.Context, account, workID string, dir crypto.Direction, blob []byte) ([]byte, error) {
	if err := DeletedAccountError(account); err != nil {
		return nil, err
	}
	id, err := crypto.BlobKeyID(blob)
	if err != nil {
		return nil, err
	}
	r, err := s.ringWith(ctx, account, id)
	if err != nil {
		return nil, &keysUnread{err}
	}
	return crypto.Open(r.opened, account, workID, dir, blob)
}

// keysUnread is open's error when the account's keys could not be read
// (the database out of reach, say): the blob was not tried, and the error
// says nothing of it.
type keysUnread struct{ err error }

func (e *keysUnread) Error() string { return "reading the account's keys: " + e.err.Error() }
func (e *keysUnread) Unwrap() error { return e.err }
