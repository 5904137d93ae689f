package server

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
)

// maxKeyIDs bounds the key ids one poll may list.
const maxKeyIDs = 64

// maxKeyCheckLen bounds each of a poll's key checks (crypto.KeyCheckLen
// now; room for a longer one later).
const maxKeyCheckLen = 32

// Key rotation without downtime: new units are sealed with the account's
// current key, but during a rotation's overlap window some instances still
// run the old profile, which holds only the previous key. Each poll lists
// the key ids the instance holds, and the automator, which holds every key,
// hands each claimed command sealed with a key the instance holds and that
// is still usable: as stored when it can, else sealed again (same account,
// work id and direction, so the binding is unchanged) with the newest
// usable key the instance holds. An instance that holds no usable key is
// refused before it claims anything, so a unit is never given to an
// instance that cannot open it.

// instanceRing returns the account's keys for a poll whose instance holds
// key ids held, with their key checks (checks: none from a proxy
// predating them, else one per key id), or nil when it lists none (a
// proxy older than rotation: it gets commands as stored). When a check is
// not that of the account's key of its id (the instance holds another
// account's key, or a mistyped one, under that id), or none of held is
// usable now, refused is true and err is the FailedPrecondition that
// tells the proxy why, and wrongKey says which: the poll is recorded as
// refused (Instance.RefusedKeyIDs, Instance.RefusedWrongKey) before it is
// answered so.
func (s *Server) instanceRing(ctx context.Context, account, instanceID string, held []uint32, checks [][]byte) (_ *keyRing, refused, wrongKey bool, _ error) {
	if len(checks) != 0 && len(checks) != len(held) {
		return nil, false, false, status.Errorf(codes.InvalidArgument, "key_checks lists %d checks for %d key_ids: it must list one for each, or none", len(checks), len(held))
	}
	for i, c := range checks {
		if len(c) > maxKeyCheckLen {
			return nil, false, false, status.Errorf(codes.InvalidArgument, "key_checks[%d] is %d bytes, longer than %d", i, len(c), maxKeyCheckLen)
		}
	}
	if len(held) == 0 {
		return nil, false, false, nil
	}
	if len(held) > maxKeyIDs {
		return nil, false, false, status.Errorf(codes.InvalidArgument, "key_ids lists %d keys, more than %d", len(held), maxKeyIDs)
	}
	r, err := s.ring(ctx, account)
	if err != nil {
		return nil, false, false, s.internal(ctx, "reading the account's keys", err)
	}
	now := s.clock.Now()
	// An id the cache does not know may come from a rotation made since it
	// was read. The ids come from the instance (a token holder), so they
	// may make the keys be read again at most once a second. A ring read
	// before the account was deleted and created again is read again at
	// once, and so is one that lacks the account's current key id as the
	// token's lookup read it (a rotation since, which may have withdrawn
	// the keys held at once, --overlap 0): what tells either comes from
	// the store.
	if tok := tokenFrom(ctx); tok.sealedKey != nil && !r.holds(tok.keyID, tok.sealedKey) {
		if r, err = s.loadRing(ctx, account); err != nil {
			return nil, false, false, s.internal(ctx, "reading the account's keys", err)
		}
	} else if slices.ContainsFunc(held, func(id uint32) bool { return !r.has(id) }) && now.Sub(r.loaded) >= reloadUnknownEvery {
		if r, err = s.loadRing(ctx, account); err != nil {
			return nil, false, false, s.internal(ctx, "reading the account's keys", err)
		}
	}
	// A key id the account does not have (any more) is not checked: it
	// is one of before a rotation, which the usable keys decide on.
	for i, c := range checks {
		if want, ok := r.checkOf(held[i]); ok && !crypto.KeyCheckEqual(c, want) {
			s.refusedPollLog.Log("instance holds a key that is not its account's key of that id (another account's key, or a mistyped one); it claims nothing",
				"account", account, "instance_id", instanceID, "key_id", held[i])
			return nil, true, true, status.Errorf(codes.FailedPrecondition,
				"instance %q holds, as key id %d, a key that is not account %q's key %d (another account's key, or a mistyped one); it claims nothing: install the account's profile (from `automator account create` or `automator account rotate-key`)",
				instanceID, held[i], account, held[i])
		}
	}
	if _, ok := r.newestUsableOf(held, now); !ok {
		s.refusedPollLog.Log("instance holds no usable key of its account; it claims nothing", "account", account, "instance_id", instanceID, "holds", held)
		return nil, true, false, status.Errorf(codes.FailedPrecondition,
			"instance %q holds key ids %v of account %q, none of them usable now (usable: %s); install the account's latest profile (from `automator account rotate-key`)",
			instanceID, held, account, r.describe(now))
	}
	return r, false, false, nil
}

// latestRing returns the account's keys as last read, for a poll that read
// r when it began: a rotation made while it waits (read by the enqueue of
// the unit it would be handed, which reads the new key id) applies to it
// at once, so a key withdrawn with --overlap 0 is not handed to a poll
// already waiting. nil when r is (an instance listing no key ids).
func (s *Server) latestRing(account string, r *keyRing) *keyRing {
	if r == nil {
		return nil
	}
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	if c := s.keys[account]; c != nil {
		return c
	}
	return r
}

// sealedFor returns unit w's command sealed for an instance holding key
// ids held, at now (see above). It never fails: a claim is made already and
// must be delivered, so a command that cannot be sealed again is handed as
// stored, and the instance reports it did not open (failed, nothing runs).
func (s *Server) sealedFor(ctx context.Context, r *keyRing, held []uint32, w store.Work, now time.Time) []byte {
	if r == nil {
		return w.SealedCommand
	}
	id, err := crypto.BlobKeyID(w.SealedCommand)
	if err != nil {
		return w.SealedCommand
	}
	if slices.Contains(held, id) && r.usable(id, now) {
		return w.SealedCommand
	}
	target, ok := r.newestUsableOf(held, now)
	if !ok {
		return w.SealedCommand
	}
	plain, err := s.open(ctx, w.Account, w.ID, crypto.DirCommand, w.SealedCommand)
	if err != nil {
		s.log.Warn("stored command did not open; handing it as stored", "work_id", w.ID, "account", w.Account, "err", err)
		return w.SealedCommand
	}
	sealed, err := crypto.Seal(target, w.Account, w.ID, crypto.DirCommand, plain)
	if err != nil {
		s.log.Error("sealing a command again for an instance's key", "work_id", w.ID, "err", err)
		return w.SealedCommand
	}
	s.log.Debug("command sealed again for the instance's key", "work_id", w.ID, "from_key", id, "to_key", target.ID)
	return sealed
}
