package server

import (
	"sync"
	"time"
)

// refusedResultsPerSecond is how many results of one account the store
// may refuse in a second (no such unit of the account, another claim, not
// claimed) before that account's results are read before they are
// written (resultGuard). A proxy's results are refused seldom: a unit
// cancelled or timed out as its result came, a result posted again whose
// answer was lost.
const refusedResultsPerSecond = 64

// waryFor is how long an account's results are read first once it went
// over refusedResultsPerSecond; refusals meanwhile extend it.
const waryFor = 10 * time.Second

// resultGuard keeps a token holder from spending the store's one writer
// on results it made up. A result is written without being read first
// (the completion is conditional on the account, the claim and the
// state), so a result for a unit that is not there costs a write
// transaction all the same, up to 256 per CompleteBatch: a flood of them
// held every account's enqueues and completions up behind the writer.
// Once an account's results are refused more than
// refusedResultsPerSecond times in a second, its results are read first
// for waryFor, and those the store would refuse are refused from the read
// (reads do not take the writer); the others are written as before.
type resultGuard struct {
	mu       sync.Mutex
	accounts map[string]*refusals // accounts with results refused lately
}

type refusals struct {
	second time.Time // start of the second counted
	n      int       // refusals in it
	until  time.Time // results are read first until then
}

// wary reports whether account's results are to be read before they are
// written, at now.
func (g *resultGuard) wary(account string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.accounts[account]
	return r != nil && now.Before(r.until)
}

// refused counts a result of account refused at now.
func (g *resultGuard) refused(account string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.accounts == nil {
		g.accounts = make(map[string]*refusals)
	}
	r := g.accounts[account]
	if r == nil {
		// Forget accounts whose counts are over: at most one entry per
		// account with refusals in the last waryFor.
		for a, old := range g.accounts {
			if now.Sub(old.second) > time.Second && !now.Before(old.until) {
				delete(g.accounts, a)
			}
		}
		r = &refusals{second: now}
		g.accounts[account] = r
	}
	if now.Sub(r.second) >= time.Second || now.Before(r.second) {
		r.second, r.n = now, 0
	}
	r.n++
	if r.n > refusedResultsPerSecond || now.Before(r.until) {
		r.until = now.Add(waryFor)
	}
}
