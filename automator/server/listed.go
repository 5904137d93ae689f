package server

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/opsgate/opsgate/automator/store"
)

// A listing of units (the dashboard's work page, read again every two
// seconds while it is open) shows of each unit its exit code or the
// proxy's reason for a failure, and to some keys its script name: a few
// bytes of blobs that may hold megabytes of output. The automator keeps
// those few bytes of each unit it opened, in memory only (the store keeps
// results sealed only), for a bounded number of units, so that a listing
// opens each unit once rather than at every read.
//
// What it keeps never changes: a unit's command is sealed once at its
// queueing (sealing it again for an instance of another key leaves its
// content as it was), and a result is recorded once, when the unit ends,
// and never replaced. Every replica sharing the store keeps its own, and
// each would open the same blobs to the same values. An entry is used only
// for the unit's account as the caller read it, so a unit of a deleted
// account (whose units move to its tombstone and open no more) finds none;
// accountDeleted drops the deleted account's entries as it drops its keys.
// Rotating a key changes nothing here: every key of an account opens its
// units for as long as the account exists.
//
// A failure to open is not kept (the next listing tries again), and
// neither is a value too long to be worth keeping (maxListedValue): only a
// proxy not ours would write one.

// maxListed bounds the units whose listed parts are kept.
const maxListed = 4096

// maxListedValue bounds a script name or failure reason kept; a longer one
// is opened at each listing.
const maxListedValue = maxFailureLen

// Outcome is what a listing shows of a unit's result.
type Outcome struct {
	ExitCode int32
	// Failure is the proxy's reason why it could not run the command (a
	// failed unit's), as sealed in its result; it may name the script.
	Failure string
}

// ListedOutcome returns the outcome of ended unit w (succeeded or failed)
// as its sealed result says, or nil if it has none or has not ended. w may
// come from a listing that left its sealed blobs out: the unit is read
// again if its outcome is not known. The caller decides who may see a
// failure's reason, which may name the script.
func (s *Server) ListedOutcome(ctx context.Context, w store.Work) (*Outcome, error) {
	o, err := s.listedOutcome(ctx, w)
	if err == nil {
		// The state is the listing's, the outcome perhaps one kept.
		err = contradicted(w, o != nil, o.failure())
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Outcome) failure() string {
	if o == nil {
		return ""
	}
	return o.Failure
}

func (s *Server) listedOutcome(ctx context.Context, w store.Work) (*Outcome, error) {
	if w.State != store.StateSucceeded && w.State != store.StateFailed {
		return nil, nil
	}
	if err := DeletedAccountError(w.Account); err != nil {
		return nil, err
	}
	if e, ok := s.listed.get(w.ID, w.Account); ok && e.outcomeKnown {
		return e.outcome, nil
	}
	if w.SealedResult == nil {
		cur, err := s.store.WorkGet(ctx, w.ID)
		if err != nil {
			return nil, fmt.Errorf("reading unit %q: %w", w.ID, err)
		}
		if cur.Account != w.Account {
			// Its account was deleted since it was listed.
			return nil, DeletedAccountError(cur.Account)
		}
		w = cur
		// Read again: its script name is kept too, so that a listing
		// that shows it does not read the unit a second time.
		if e, ok := s.listed.get(w.ID, w.Account); !ok || !e.scriptKnown {
			_, _ = s.ListedScript(ctx, w) // an error is the listing's to tell, if it asks
		}
	}
	var o *Outcome
	if len(w.SealedResult) > 0 {
		var err error
		if o, err = s.openOutcome(ctx, w); err != nil {
			return nil, err
		}
	}
	if o == nil || len(o.Failure) <= maxListedValue {
		s.listed.put(w.ID, w.Account, func(e *listedEntry) { e.outcome, e.outcomeKnown = o, true })
	}
	return o, nil
}

// ListedScript returns the script name of unit w's command, for a caller
// that may see it. w may come from a listing that left its sealed blobs
// out: the unit is read again if its script name is not known.
func (s *Server) ListedScript(ctx context.Context, w store.Work) (string, error) {
	if err := DeletedAccountError(w.Account); err != nil {
		return "", err
	}
	if e, ok := s.listed.get(w.ID, w.Account); ok && e.scriptKnown {
		return e.script, nil
	}
	if w.SealedCommand == nil {
		cur, err := s.store.WorkGet(ctx, w.ID)
		if err != nil {
			return "", fmt.Errorf("reading unit %q: %w", w.ID, err)
		}
		if cur.Account != w.Account {
			// Its account was deleted since it was listed.
			return "", DeletedAccountError(cur.Account)
		}
		w = cur
	}
	cmd, err := s.openCommand(ctx, w)
	if err != nil {
		return "", err
	}
	script := cmd.GetScript()
	if len(script) <= maxListedValue {
		s.listed.put(w.ID, w.Account, func(e *listedEntry) { e.script, e.scriptKnown = script, true })
	}
	return script, nil
}

// ListedKnown reports whether ListedOutcome, and ListedScript when script,
// answer unit w without reading it again: what they show of it is kept, or
// there is nothing to show (a unit not ended, or of a deleted account). A
// listing most of whose units are not known is cheaper listed again with
// their sealed blobs, in one query, than read again one unit at a time.
func (s *Server) ListedKnown(w store.Work, script bool) bool {
	if _, deleted := store.DeletedAccount(w.Account); deleted {
		return true
	}
	outcome := w.State == store.StateSucceeded || w.State == store.StateFailed
	if !outcome && !script {
		return true
	}
	e, ok := s.listed.get(w.ID, w.Account)
	return ok && (e.outcomeKnown || !outcome) && (e.scriptKnown || !script)
}

// listedEntry is what is kept of one unit.
type listedEntry struct {
	id, account  string
	outcome      *Outcome
	outcomeKnown bool
	script       string
	scriptKnown  bool
}

// listedCache keeps the listed parts of the units opened last, at most max
// of them, the least recently used going first.
type listedCache struct {
	mu    sync.Mutex
	max   int
	order *list.List               // of *listedEntry, most recent first
	byID  map[string]*list.Element // work id → its element
}

func newListedCache(max int) *listedCache {
	return &listedCache{max: max, order: list.New(), byID: make(map[string]*list.Element)}
}

// get returns a copy of the entry of unit id when it was kept for account.
func (c *listedCache) get(id, account string) (listedEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return listedEntry{}, false
	}
	e := el.Value.(*listedEntry)
	if e.account != account {
		return listedEntry{}, false
	}
	c.order.MoveToFront(el)
	return *e, true
}

// put sets what set sets in the entry of unit id of account, making it
// if need be (an entry kept for another account is replaced), and drops
// the least recently used entry past max.
func (c *listedCache) put(id, account string, set func(*listedEntry)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[id]; ok {
		e := el.Value.(*listedEntry)
		if e.account != account {
			*e = listedEntry{id: id, account: account}
		}
		set(e)
		c.order.MoveToFront(el)
		return
	}
	e := &listedEntry{id: id, account: account}
	set(e)
	c.byID[id] = c.order.PushFront(e)
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byID, last.Value.(*listedEntry).id)
	}
}

// forgetAccount drops the entries of account's units.
func (c *listedCache) forgetAccount(account string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.order.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*listedEntry); e.account == account {
			c.order.Remove(el)
			delete(c.byID, e.id)
		}
		el = next
	}
}

// len is the number of entries kept.
func (c *listedCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// openOutcome opens unit w's sealed result for what a listing shows of it.
func (s *Server) openOutcome(ctx context.Context, w store.Work) (*Outcome, error) {
	r, err := s.openResult(ctx, w, w.SealedResult)
	if err != nil {
		return nil, err
	}
	return &Outcome{ExitCode: r.GetExitCode(), Failure: r.GetFailure()}, nil
}
