package server

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
)

// sharedIDWarnEvery is how often the automator says again that two proxy
// processes poll as one instance, while they go on doing so.
const sharedIDWarnEvery = time.Hour

// maxSharedIDKeys bounds the instances sharedIDs tracks: the instance id
// is the proxy's to choose. Past it, the record starts afresh.
const maxSharedIDKeys = 1 << 16

// sharedIDs notices two proxy processes (runs) that poll as one instance
// of an account: two hosts of the same name (cloned VMs), or two proxies
// on one host started from one config without --instance-id. Nothing
// breaks (each run's polls, claims and running units are its own), but
// the instance listing shows them as one: its "online" hides the death of
// either, and results and timeout reasons name the same instance for
// both. So the operator is told, in the log.
//
// A restart changes the run too, but the old run never polls again; two
// live processes alternate. So a poll of a run that is not the last one
// to poll, but the one before it, heard from lately, says there are two.
type sharedIDs struct {
	mu sync.Mutex
	m  map[[2]string]*runsSeen
}

// runsSeen holds the last two runs to poll as one instance.
type runsSeen struct {
	last, other runSeen
	warned      time.Time
}

type runSeen struct {
	run  string
	peer string
	at   time.Time
}

// notePoll records a poll of run (its proxy process) of instance from
// peer at now, and reports the other run polling as the same instance
// when the operator is to be told of it, and whether run is new: not one
// of the last two to poll, nor the one before the last heard from lately
// (a restart, or the second process's first poll). alive is how long a
// live run may go without polling.
func (c *sharedIDs) notePoll(account, instance, run, peer string, now time.Time, alive time.Duration) (other runSeen, tell, isNew bool) {
	if run == "" {
		return runSeen{}, false, false // a proxy that predates run ids
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := [2]string{account, instance}
	r := c.m[key]
	if r == nil {
		if c.m == nil || len(c.m) >= maxSharedIDKeys {
			c.m = make(map[[2]string]*runsSeen)
		}
		r = &runsSeen{}
		c.m[key] = r
	}
	this := runSeen{run: run, peer: peer, at: now}
	switch {
	case r.last.run == run:
		r.last = this
		return runSeen{}, false, false
	case r.other.run == run && now.Sub(r.other.at) < alive:
		// It polled, then another run did, and now it again: both live.
		r.other, r.last = r.last, this
		if !r.warned.IsZero() && now.Sub(r.warned) < sharedIDWarnEvery {
			return runSeen{}, false, false
		}
		r.warned = now
		return r.other, true, false
	default:
		// A new run (a restart, or the second process's first poll).
		r.other, r.last = r.last, this
		return runSeen{}, false, true
	}
}

// forgetAccount drops the runs seen of the instances of account
// (Server.accountGone).
func (c *sharedIDs) forgetAccount(account string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k[0] == account {
			delete(c.m, k)
		}
	}
}

// noteRun tells the operator, at most once an hour for each instance,
// when two proxy processes poll as one instance of account. It returns
// whether run is new (sharedIDs.notePoll).
func (s *Server) noteRun(ctx context.Context, account, instance, hostname, run string) bool {
	addr := ""
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		addr = pr.Addr.String()
	}
	// A live run polls at least once a poll window; "online" allows two.
	other, tell, isNew := s.sharedIDs.notePoll(account, instance, run, addr, s.clock.Now(), 2*s.pollWindow+seenEvery)
	if !tell {
		return isNew
	}
	s.log.Warn("two proxy processes poll as one instance; each runs its own units, but listings show them as one and cannot tell when one of them stops: give each its own instance_id (in its config or with --instance-id)",
		"account", account, "instance_id", instance, "hostname", hostname,
		"peer", addr, "other_peer", other.peer)
	return false // a run polling beside another, not a new one
}
