package server

import (
	"context"
	"time"
)

// DoneSubscriptions counts callers' subscriptions to the end of units, so
// tests can check that none is left behind.
func (s *Server) DoneSubscriptions() int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	n := 0
	for _, m := range s.hub.done {
		n += len(m)
	}
	return n
}

// QueueCounts is a store that counts its WorkQueuedCount calls.
type QueueCounts = countCounter

// Calls is the number of WorkQueuedCount calls so far.
func (c *countCounter) Calls() int64 { return c.calls.Load() }

// WaitingPolls counts the polls of account parked waiting for work: past
// their first look at the queue, so that a unit queued now is handed to one
// of them. (A poll is in the hub's list from before that look.)
func (s *Server) WaitingPolls(account string) int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	n := 0
	if l := s.hub.pollers[account]; l != nil {
		for e := l.Front(); e != nil; e = e.Next() {
			if e.Value.(*poller).parked {
				n++
			}
		}
	}
	return n
}

// OnPollLeft calls f each time a poll leaves the waiting list for good
// (its window ended, or the automator stops), before it waits for the
// units still being stored as its claims, with how many those are. Set it
// before the server serves polls.
func (s *Server) OnPollLeft(f func(account, instance string, inFlight int)) {
	s.hub.testHookLeft = f
}

// OnPollWindow makes each poll's window end when the channel f returns
// for it is ready (f is told the poll's account, instance and window),
// instead of after the window. Set it before the server serves polls.
func (s *Server) OnPollWindow(f func(account, instance string, window time.Duration) <-chan time.Time) {
	s.testHookWindow = f
}

// OnSweepTimeout makes the SweepTimeout of each store call of the sweeper
// and of the watch for deleted accounts pass when the test calls the
// expire f is given for that call, instead of after the timeout (d).
// Set it before Run.
func (s *Server) OnSweepTimeout(f func(d time.Duration, expire func())) {
	s.testHookSweepTimeout = f
}

// OnPurgePause makes PurgeEnded call f instead of waiting between two
// batches, with how long it would have waited.
func (s *Server) OnPurgePause(f func(ctx context.Context, d time.Duration) error) {
	s.purgePause = f
}

// PurgeBatch is how many units one batch of PurgeEnded deletes.
const PurgeBatch = purgeBatch

// MaxSealedResult is the largest sealed result Complete reads.
const MaxSealedResult = maxSealedResult

// AccountEntries counts what the automator keeps in memory under account:
// the hub's counts and records, the queue count, the instances' and runs'
// records.
func (s *Server) AccountEntries(account string) int {
	n := 0
	h := s.hub
	h.mu.Lock()
	for _, ok := range []bool{has(h.work, account), has(h.empty, account), has(h.cut, account), has(h.drained, account)} {
		if ok {
			n++
		}
	}
	n += withAccount(h.checked, account) + withAccount(h.latest, account) + withAccount(h.conns, account)
	h.mu.Unlock()
	s.queued.mu.Lock()
	if has(s.queued.m, account) {
		n++
	}
	s.queued.mu.Unlock()
	s.seen.mu.Lock()
	n += withAccount(s.seen.m, account)
	s.seen.mu.Unlock()
	s.sharedIDs.mu.Lock()
	n += withAccount(s.sharedIDs.m, account)
	s.sharedIDs.mu.Unlock()
	return n
}

func has[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

// withAccount counts the entries of m whose key starts with account.
func withAccount[K [2]string | [3]string, V any](m map[K]V, account string) int {
	n := 0
	for k := range m {
		if k[0] == account {
			n++
		}
	}
	return n
}

// ForgetDeletedAfter is how long after it saw a deletion the automator
// forgets the account's entries and series.
const ForgetDeletedAfter = forgetDeletedAfter

// BatchPolls keeps known instances' polls in memory until FlushInstances,
// as RecordInstances does while it runs, from the moment it returns.
func (s *Server) BatchPolls() {
	s.seen.mu.Lock()
	s.seen.batching = true
	s.seen.mu.Unlock()
}

// KeyCacheTTL is how long the automator trusts an account's keys as read.
const KeyCacheTTL = keyCacheTTL

// ExpireBatch is the most units one sweep times out.
const ExpireBatch = expireBatch
