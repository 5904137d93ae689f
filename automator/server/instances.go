package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// seenEvery is how stale an instance's stored last poll may get. The
// record feeds listings, the dashboard and metrics only, so it need not be
// durable per poll: while RecordInstances runs, a poll of a known instance
// only updates its record in memory, and the records that changed are
// written every seenEvery in one transaction per batch. A new instance,
// one whose host or version changed, one that says it is stopping or no
// longer says so, one refused (for want of a usable key, or for an
// expired account token) after one accepted, or the reverse, or for
// another cause (store.InstanceSeenParams.RefusedCause), and the first poll this automator sees of
// a new proxy process (run) of an instance are written at once: a stop, a
// start after it, and a key rotation that leaves an instance without a
// usable key (and the new profile installed), show in listings as they
// happen. A refused instance polls with backoff, but a token's holder may
// poll as often as it likes: its refused polls, like accepted ones, are
// batched while nothing changes, with the key ids each listed. Without RecordInstances, a
// poll is written when its record is this old. Either way listings are at
// most this stale; "online" allows two poll windows plus this.
const seenEvery = 5 * time.Second

// seenBatch bounds the polls written in one transaction, so a flush holds
// the store's write path only briefly.
const seenBatch = 512

// maxSeen bounds the instances seenCache holds. The instance id is the
// proxy's to choose, so without a bound one account's token could grow the
// automator's memory for ever. Past it, records already written are
// dropped: the next poll of such an instance is written at once, as a new
// instance's is.
const maxSeen = 1 << 16

// seenCache holds the latest poll of each instance.
type seenCache struct {
	mu sync.Mutex
	m  map[[2]string]*seenRecord
	// dirty lists, once each, the records whose latest poll is not written.
	dirty [][2]string
	// batching is set while RecordInstances runs.
	batching bool
}

type seenRecord struct {
	last    store.InstanceSeenParams // the latest poll
	written time.Time                // Now of the latest poll written
	dirty   bool                     // last is not written yet
	// run and seq are the run id and poll_seq of the latest poll recorded
	// (written, or in last), when it had them.
	run string
	seq uint64
}

// pollSeen is what instanceSeen is told of a poll beside its record.
type pollSeen struct {
	run string // PollRequest.run_id; "" from a proxy predating it
	seq uint64 // PollRequest.poll_seq; 0 when not numbered
	// newRun: the first poll this automator sees of a run (sharedIDs), a
	// process started since the record was written, perhaps after a stop
	// recorded by another replica.
	newRun bool
}

// otherAccountLocked is true for a poll of an account other than the one
// of r's latest poll: one created again under its name after that one was
// deleted (InstanceSeenParams.AccountCreatedAt). Nothing of r is the new
// account's: its first poll is written at once, as a new instance's is,
// and polls of the old account kept in memory are never written under
// it (the store checks it too, for every replica's batches).
func (r *seenRecord) otherAccountLocked(p store.InstanceSeenParams) bool {
	return !r.last.AccountCreatedAt.Equal(p.AccountCreatedAt)
}

// staleLocked is true for a poll of the run of r's latest poll, numbered
// before it: a poll of the process that was still on its way when the
// process polled again (one cancelled by the stop whose next poll said it
// was stopping). It is older than what r holds and is not recorded.
func (r *seenRecord) staleLocked(ps pollSeen) bool {
	return ps.run != "" && ps.run == r.run && ps.seq != 0 && ps.seq < r.seq
}

// numberedLocked is true for a poll of the run of r's latest poll, both
// numbered: they are ordered by their numbers, not by when each reached
// the automator nor by its clock, which may have stepped back between
// them.
func (r *seenRecord) numberedLocked(ps pollSeen) bool {
	return ps.run != "" && ps.run == r.run && ps.seq != 0 && r.seq != 0
}

// instanceSeen records a poll: in memory while RecordInstances runs and the
// instance is known and unchanged, else in the store.
func (s *Server) instanceSeen(ctx context.Context, p store.InstanceSeenParams, ps pollSeen) error {
	key := [2]string{p.Account, p.InstanceID}
	c := &s.seen
	c.mu.Lock()
	known := c.m[key]
	if known != nil && known.otherAccountLocked(p) {
		known = nil // recorded as new: written at once, below, in its place
	}
	if r := known; r != nil && r.staleLocked(ps) {
		c.mu.Unlock()
		return nil
	}
	if r := known; r != nil && r.last.Hostname == p.Hostname && r.last.Version == p.Version &&
		r.last.Stopping == p.Stopping && r.last.RefusedCause() == p.RefusedCause() && !ps.newRun {
		if c.batching {
			// Not stale (above): numbered, it follows r's latest.
			if r.numberedLocked(ps) || p.Now.After(r.last.Now) {
				r.last = p
				r.run, r.seq = ps.run, ps.seq
				if !r.dirty {
					r.dirty = true
					c.dirty = append(c.dirty, key)
				}
			}
			c.mu.Unlock()
			return nil
		}
		if p.Now.After(r.written) && p.Now.Sub(r.written) < seenEvery {
			c.mu.Unlock()
			return nil
		}
	}
	c.mu.Unlock()
	return s.writeSeen(ctx, p, ps)
}

// writeSeen writes poll p at once, checking the account's bound of
// instance records, and keeps it in memory as written.
func (s *Server) writeSeen(ctx context.Context, p store.InstanceSeenParams, ps pollSeen) error {
	c := &s.seen
	key := [2]string{p.Account, p.InstanceID}
	// Not ordered with the other polls of its run from here on: a later
	// one (the stop) may be written first, by this replica or another.
	// The store orders them by their numbers (InstanceSeenParams.Run).
	// At the bound, a new instance takes the place of one offline (listed
	// so): a standby started under a new id, or a host renamed, is not
	// locked out by the records of a flood of made-up ids (a review).
	p.MaxPerAccount = s.limits.MaxInstancesPerAccount
	p.EvictBefore = p.Now.Add(-InstanceOnlineWithin(s.pollWindow))
	// The instance whose record made room is forgotten here too: known,
	// its next poll would be kept in memory and written in a batch, which
	// checks no bound, and would put its record back past it (a
	// re-review: 1,000 ids of a flood polled again made 21,000 records).
	// Not ordered with this poll's own record below: the store calls it
	// with no lock of c held.
	p.Evicted = func(id string) {
		c.mu.Lock()
		delete(c.m, [2]string{p.Account, id})
		c.mu.Unlock()
	}
	if err := s.store.InstanceSeen(ctx, p); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[2]string]*seenRecord)
	}
	r := c.m[key]
	if r == nil {
		if len(c.m) >= maxSeen {
			c.pruneLocked()
		}
		if len(c.m) >= maxSeen {
			return nil // written; kept in memory no more
		}
		r = &seenRecord{}
		c.m[key] = r
	}
	if r.otherAccountLocked(p) {
		// What r holds is the deleted account's, written or not: the
		// store leaves it out now that its name is another account's.
		*r = seenRecord{}
	}
	newer := r.last.Now.IsZero() || !p.Now.Before(r.last.Now)
	if r.numberedLocked(ps) {
		// A poll kept in memory while this one was written may be the one
		// it followed.
		newer = ps.seq >= r.seq
	}
	if newer || r.last.Hostname != p.Hostname || r.last.Version != p.Version {
		r.last = p
		r.run, r.seq = ps.run, ps.seq
		r.dirty = false // what is in memory is what was written
	}
	r.written = p.Now
	return nil
}

// pruneLocked drops the records whose latest poll is written: only those
// pending (dirty) must stay until a flush writes them.
func (c *seenCache) pruneLocked() {
	for k, r := range c.m {
		if !r.dirty {
			delete(c.m, k)
		}
	}
}

// forgetAccount drops the records of the instances of account whose latest
// poll is written (Server.accountGone).
func (c *seenCache) forgetAccount(account string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.m {
		if k[0] == account && !r.dirty {
			delete(c.m, k)
		}
	}
}

// flushFailed logs a failed write of the instances' polls (storeFailure:
// every seenEvery while a fault lasts).
func (s *Server) flushFailed(err error) { s.storeFailure("writing instances' polls", err) }

// RecordInstances keeps known instances' polls in memory and writes those
// that changed every few seconds, until ctx ends; then it writes what is
// left, and polls are written as they come again. Run it beside Run; a
// server without it writes polls as they come (at most one per instance
// every few seconds).
func (s *Server) RecordInstances(ctx context.Context) {
	s.seen.mu.Lock()
	s.seen.batching = true
	s.seen.mu.Unlock()
	t := time.NewTicker(seenEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := s.FlushInstances(ctx); err != nil && ctx.Err() == nil {
				s.flushFailed(err)
			}
		case <-ctx.Done():
			s.seen.mu.Lock()
			s.seen.batching = false
			s.seen.mu.Unlock()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := s.FlushInstances(fctx); err != nil {
				s.log.Error("writing instances' polls at shutdown", "err", err)
			}
			return
		}
	}
}

// FlushInstances writes every poll kept in memory and not written yet, in
// batches of at most seenBatch. On an error the polls not written stay
// pending for the next flush.
func (s *Server) FlushInstances(ctx context.Context) error {
	c := &s.seen
	for {
		c.mu.Lock()
		var batch []store.InstanceSeenParams
		n := 0
		for ; n < len(c.dirty) && len(batch) < seenBatch; n++ {
			if r := c.m[c.dirty[n]]; r != nil && r.dirty {
				r.dirty = false
				batch = append(batch, r.last)
			}
		}
		c.dirty = c.dirty[n:]
		if len(c.dirty) == 0 {
			c.dirty = nil // let the backing array go
		}
		c.mu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		mark := s.writeMark()
		unrecorded, err := s.store.InstancesSeen(ctx, batch)
		if err == nil {
			s.wrote(mark)
		}
		c.mu.Lock()
		for _, p := range batch {
			key := [2]string{p.Account, p.InstanceID}
			r := c.m[key]
			if r != nil && r.otherAccountLocked(p) {
				// Now the record of an account created again under the
				// name (instanceSeen): p, of the deleted one, is nothing
				// of it, written or not.
				continue
			}
			if r == nil {
				// Dropped while it was written (pruneLocked): if the write
				// failed, it is pending again.
				if err != nil {
					c.m[key] = &seenRecord{last: p, dirty: true}
					c.dirty = append(c.dirty, key)
				}
				continue
			}
			switch {
			case err != nil && !r.dirty:
				r.dirty = true
				c.dirty = append(c.dirty, key)
			case err == nil && p.Now.After(r.written):
				r.written = p.Now
			}
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if err := s.writeUnrecorded(ctx, unrecorded); err != nil {
			return err
		}
	}
}

// writeUnrecorded writes at once, as new instances' polls are, the polls
// of a batch that InstancesSeen left out because their instances have no
// record: made room for at the account's bound by another instance's
// poll (on another replica, which could not make this one forget them),
// or deleted. A batch checks no bound, and wrote them back past it.
// Refused at the bound, such a poll is not recorded, and the instance's
// next poll is refused.
func (s *Server) writeUnrecorded(ctx context.Context, polls []store.InstanceSeenParams) error {
	c := &s.seen
	var first error
	for _, p := range polls {
		key := [2]string{p.Account, p.InstanceID}
		c.mu.Lock()
		r := c.m[key]
		if r == nil || r.otherAccountLocked(p) {
			// Forgotten meanwhile: its next poll is written at once.
			c.mu.Unlock()
			continue
		}
		// The latest poll kept, p or one since, pending or not.
		last, ps := r.last, pollSeen{run: r.run, seq: r.seq}
		delete(c.m, key)
		c.mu.Unlock()
		err := s.writeSeen(ctx, last, ps)
		if err != nil && !errors.Is(err, store.ErrTooManyInstances) && first == nil {
			first = err
		}
	}
	return first
}
