package server

import (
	"container/list"
	"sync"
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
}

func newHub() *hub {
	return &hub{
		pollers: make(map[string]*list.List),
		done:    make(map[string]map[*doneSub]struct{}),
	}
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

// doneSub is one caller waiting for a unit to end. c is closed when it does.
type doneSub struct {
	h  *hub
	id string
	c  chan struct{}
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

// NotifyDone wakes every caller waiting for unit id.
func (h *hub) NotifyDone(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.done[id] {
		close(s.c)
	}
	delete(h.done, id)
}
