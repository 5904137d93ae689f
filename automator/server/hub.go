package server

import (
	"container/list"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// hub wakes goroutines of this automator when the queue changes, so neither
// pollers nor waiting callers re-read the store in a loop.
//
// Pollers wait per account in FIFO order. An enqueue wakes exactly one of
// them (no thundering herd); a woken poller leaves the list and re-arms
// before it tries to claim again, so a wake-up is never lost between a
// failed claim and the next wait. A poller that goes away holding an
// unconsumed wake-up passes it on.
//
// Callers waiting for a unit subscribe to its id and are woken when it ends.
//
// With several automator replicas a cross-replica signal (LISTEN/NOTIFY)
// feeds the same two calls, NotifyWork and NotifyDone.
type hub struct {
	mu      sync.Mutex
	pollers map[string]*list.List // account → waiting pollers, oldest first
	done    map[string]map[*doneSub]struct{}
	// work counts, per account, the calls of NotifyWork: every unit queued
	// here or announced by another replica. empty is what the latest claim
	// that found nothing saw of it (seenAt).
	work  map[string]uint64
	empty map[string]seenAt
	// cut counts, per account, the claimed units that ended other than by
	// their claimer's result (cancelled, timed out): NotifyInstance calls.
	// checked is what each instance's latest look at its running units
	// saw of it (runningKnown).
	cut     map[string]uint64
	checked map[[2]string]seenAt
}

// maxChecked bounds hub.checked; past it the map starts again (every
// instance then looks at its running units once more).
const maxChecked = 1 << 17

// seenAt: a look at the store at time at, begun when a hub count stood at
// n (empty: a claim that found nothing, with the account's NotifyWork
// count; checked: an instance's look at its running units, with the
// account's count of units cut short).
type seenAt struct {
	n  uint64
	at time.Time
}

func newHub() *hub {
	return &hub{
		pollers: make(map[string]*list.List),
		done:    make(map[string]map[*doneSub]struct{}),
		work:    make(map[string]uint64),
		empty:   make(map[string]seenAt),
		cut:     make(map[string]uint64),
		checked: make(map[[2]string]seenAt),
	}
}

// cutSeen returns the account's count of units ended under their claimer,
// to pass to checkedRunning after a look at an instance's running units
// begun after it.
func (h *hub) cutSeen(account string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cut[account]
}

// checkedRunning records that instance looked at the states of its running
// units at now, begun when the account's cut count was cut.
func (h *hub) checkedRunning(account, instance string, cut uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.checked) >= maxChecked {
		clear(h.checked)
	}
	h.checked[[2]string{account, instance}] = seenAt{n: cut, at: now}
}

// runningKnown reports whether none of an instance's running units can have
// ended without it knowing: it looked less than fresh ago and no claimed
// unit of the account was cancelled or timed out since. (Its own results
// it knows; a unit it claimed since can only end that way too.) Units of
// other replicas are announced through the Broadcaster, best effort:
// fresh bounds how late a lost announcement is noticed.
func (h *hub) runningKnown(account, instance string, now time.Time, fresh time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.checked[[2]string{account, instance}]
	return ok && c.n == h.cut[account] && now.Sub(c.at) < fresh && !now.Before(c.at)
}

// workSeen returns the account's NotifyWork count, to pass to foundEmpty
// after a claim begun after it found nothing.
func (h *hub) workSeen(account string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.work[account]
}

// foundEmpty records that a claim for account, begun when its NotifyWork
// count was work, found nothing at now.
func (h *hub) foundEmpty(account string, work uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.work[account] == work {
		h.empty[account] = seenAt{n: work, at: now}
	}
}

// expectWork reports whether a claim for account should find a unit: one
// was announced since the latest claim that found nothing, or none has
// found nothing yet.
func (h *hub) expectWork(account string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.empty[account]
	return !ok || e.n != h.work[account]
}

// knownEmpty reports whether a claim for account would surely find nothing
// now: one found nothing less than fresh ago and no unit was announced
// since. Units only become claimable by being queued, and every unit queued
// is announced, here or (through the Broadcaster, best effort) from another
// replica: fresh bounds how late a lost announcement is noticed.
func (h *hub) knownEmpty(account string, now time.Time, fresh time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.empty[account]
	return ok && e.n == h.work[account] && now.Sub(e.at) < fresh && !now.Before(e.at)
}

// poller is one Poll call waiting for work.
type poller struct {
	h        *hub
	account  string
	instance string
	c        chan struct{} // capacity 1: a pending wake-up
	elem     *list.Element // nil while not in the waiting list
}

// poller registers a waiting poller; the caller must Close it.
func (h *hub) poller(account, instance string) *poller {
	p := &poller{h: h, account: account, instance: instance, c: make(chan struct{}, 1)}
	p.rearm()
	return p
}

// rearm puts p back at the end of its account's waiting list.
func (p *poller) rearm() {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	if p.elem != nil {
		return
	}
	l := p.h.pollers[p.account]
	if l == nil {
		l = list.New()
		p.h.pollers[p.account] = l
	}
	p.elem = l.PushBack(p)
}

// Close unregisters p and hands an unconsumed wake-up to another poller.
func (p *poller) Close() {
	p.h.mu.Lock()
	p.h.removeLocked(p)
	p.h.mu.Unlock()
	select {
	case <-p.c:
		p.h.NotifyWork(p.account, 1)
	default:
	}
}

func (h *hub) removeLocked(p *poller) {
	if p.elem == nil {
		return
	}
	l := h.pollers[p.account]
	l.Remove(p.elem)
	p.elem = nil
	if l.Len() == 0 {
		delete(h.pollers, p.account)
	}
}

func (h *hub) signalLocked(p *poller) {
	h.removeLocked(p)
	select {
	case p.c <- struct{}{}:
	default:
	}
}

// NotifyWork wakes up to n waiting pollers of account, oldest first.
func (h *hub) NotifyWork(account string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.work[account]++
	delete(h.empty, account)
	l := h.pollers[account]
	for ; n > 0 && l != nil && l.Len() > 0; n-- {
		h.signalLocked(l.Front().Value.(*poller))
		l = h.pollers[account]
	}
}

// NotifyInstance wakes every waiting poller of one instance, so it learns at
// once that a unit it runs was cancelled.
func (h *hub) NotifyInstance(account, instance string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cut[account]++
	l := h.pollers[account]
	if l == nil {
		return
	}
	var match []*poller
	for e := l.Front(); e != nil; e = e.Next() {
		if p := e.Value.(*poller); p.instance == instance {
			match = append(match, p)
		}
	}
	for _, p := range match {
		h.signalLocked(p)
	}
}

// waiting reports how many pollers of account wait (for tests and metrics).
func (h *hub) waiting(account string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.pollers[account]; l != nil {
		return l.Len()
	}
	return 0
}

// doneSub is one caller waiting for a unit to end. c is closed when it does;
// ended is then the unit as it ended, when the notifier had it (nil when the
// news came from another replica: the caller reads the store).
type doneSub struct {
	h     *hub
	id    string
	c     chan struct{}
	ended *store.Work
}

// WaitDone subscribes to the end of unit id; the caller must Close it.
func (h *hub) WaitDone(id string) *doneSub {
	s := &doneSub{h: h, id: id, c: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.done[id]
	if m == nil {
		m = make(map[*doneSub]struct{})
		h.done[id] = m
	}
	m[s] = struct{}{}
	return s
}

func (s *doneSub) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if m := s.h.done[s.id]; m != nil {
		if _, ok := m[s]; ok {
			delete(m, s)
			if len(m) == 0 {
				delete(s.h.done, s.id)
			}
		}
	}
}

// NotifyDone wakes every caller waiting for unit id. ended, when not nil,
// is the unit as it ended, handed to them so none reads it again; they
// must not change it.
func (h *hub) NotifyDone(id string, ended *store.Work) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.done[id] {
		s.ended = ended
		close(s.c)
	}
	delete(h.done, id)
}
