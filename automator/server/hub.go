package server

import (
	"container/list"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// hub wakes goroutines of this automator when the queue changes, so neither
// pollers nor waiting callers re-read the store in a loop.
//
// Pollers wait per account in FIFO order. An enqueue wakes exactly one of
// them (no thundering herd); a woken poller leaves the list and re-arms
// before it tries to claim again, so a wake-up is never lost between a
// failed claim and the next wait. Pollers that cannot take units (their
// token or keys expired, their caller left) are not woken; a poller that
// goes away holding an unconsumed wake-up, or finds when woken that it
// cannot take units, passes it on. When the queue holds nothing
// claimable, an enqueue instead reserves the oldest poller (one whose
// connection was heard from lately, when there is one: quietAfter) and
// hands it the unit, stored as claimed by it (reserve, hand). So can one
// while a poller's own claim is under way, when the account's queue
// drains as fast as it fills (parkWhileClaiming).
//
// Callers waiting for a unit subscribe to its id and are woken when it ends.
//
// With several automator replicas a cross-replica signal (LISTEN/NOTIFY)
// feeds the hub too (Server.apply): NotifyWork, NotifyDone and
// NotifyInstance as this replica's own events do, supersedeRun for a run
// that polled another replica, and resumed when events may have been
// missed.
type hub struct {
	mu      sync.Mutex
	pollers map[string]*list.List // account → waiting pollers, oldest first
	done    map[string]map[*doneSub]struct{}
	// work counts, per account, the calls of NotifyWork: every unit queued
	// here or announced by another replica, and every wake-up passed on or
	// claim that may have left units behind (poll.go). empty is what the
	// latest claim that found nothing saw of it (seenAt).
	work  map[string]uint64
	empty map[string]seenAt
	// cut counts, per account, the claimed units that ended other than by
	// their claimer's result (cancelled, timed out): NotifyInstance calls.
	// checked is what each proxy process's latest look at its running
	// units saw of it (runningKnown), by account, instance and run id: two
	// processes sharing an instance id run different units.
	cut     map[string]uint64
	checked map[[3]string]look
	// checkedTold counts the ids the looks in checked hold (look.told).
	checkedTold int
	// filling: per account, the poller that further units may still be
	// handed to (reserve).
	filling map[string]*poller
	// drained: per account, when the latest claim took fewer units than
	// it asked for (absent: the latest took all it asked for, or none
	// was made).
	drained map[string]time.Time
	// runs: the latest poller of each run of an instance (account,
	// instance, run id), for supersedeLocked.
	runs map[[3]string]*poller
	// latest: the highest poll number of each run heard of here, from its
	// own polls or another replica's announcement (EventRunPolled),
	// whether or not that poll still waits: a poll numbered at or below it
	// that registers later is stale (poller). Bounded like checked.
	latest map[[3]string]int64
	// conns: the connection (its peer address) each run last polled on,
	// when other replicas share the queue (newConnection).
	conns map[[3]string]string

	// testHookLeft, when set (tests), is called by leave once the poll
	// has left the waiting list, before it waits for the units still
	// being stored as its claims, with how many those are.
	testHookLeft func(account, instance string, inFlight int)
}

// maxChecked bounds hub.checked; past it the map starts again (every
// instance then looks at its running units once more).
const maxChecked = 1 << 17

// maxCheckedTold bounds the ids the looks of hub.checked hold together
// (some 64 bytes each); past it the map starts again too. A poll may list
// up to maxRunning units, and a token's holder could poll under ever new
// run ids listing thousands of ended units each: by its number of looks
// alone, the map grew by some 270 KiB a poll, to tens of GiB (a review).
const maxCheckedTold = 1 << 18

// seenAt: a look at the store at time at, begun when a hub count stood at
// n (empty: a claim that found nothing, with the account's NotifyWork
// count; checked: an instance's look at its running units, with the
// account's count of units cut short).
type seenAt struct {
	n  uint64
	at time.Time
}

// look is a proxy process's look at its running units (seenAt), with the
// units it found ended: the answer telling of them may never reach the
// proxy.
type look struct {
	seenAt
	told []string
}

func newHub() *hub {
	return &hub{
		pollers: make(map[string]*list.List),
		done:    make(map[string]map[*doneSub]struct{}),
		work:    make(map[string]uint64),
		empty:   make(map[string]seenAt),
		cut:     make(map[string]uint64),
		checked: make(map[[3]string]look),
		filling: make(map[string]*poller),
		drained: make(map[string]time.Time),
		runs:    make(map[[3]string]*poller),
		latest:  make(map[[3]string]int64),
		conns:   make(map[[3]string]string),
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

// checkedRunning records that run (the proxy process) of instance looked
// at the states of its running units at now, begun when the account's cut
// count was cut, and found the units told ended. A look without a run id
// is not recorded (runningKnown).
func (h *hub) checkedRunning(account, instance, run string, cut uint64, now time.Time, told []string) {
	if run == "" {
		// Not one process: any of the account's may poll under the
		// instance id without a run id (runningKnown).
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	key := [3]string{account, instance, run}
	h.checkedTold -= len(h.checked[key].told)
	if len(h.checked) >= maxChecked || h.checkedTold+len(told) > maxCheckedTold {
		clear(h.checked)
		h.checkedTold = 0
	}
	h.checked[key] = look{seenAt: seenAt{n: cut, at: now}, told: told}
	h.checkedTold += len(told)
}

// retellAt returns when a poll of a proxy process that still lists running
// a unit its latest look told ended may look again (that look, fresh
// before then, stands in for a new one): the answer that told it may never
// have reached the proxy (a poll it dropped when a slot freed, a lost
// connection), or the proxy was still ending the script when it polled
// again. ok is false when the poll lists no such unit.
func (h *hub) retellAt(account, instance, run string, running []string, fresh time.Duration) (at time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, found := h.checked[[3]string{account, instance, run}]
	if !found {
		return time.Time{}, false
	}
	for _, id := range running {
		if slices.Contains(c.told, id) {
			return c.at.Add(fresh), true
		}
	}
	return time.Time{}, false
}

// runningKnown reports whether none of the running units of a proxy
// process (instance and run) can have ended without it knowing: it looked
// less than fresh ago and no claimed unit of the account was cancelled or
// timed out since. (Its own results it knows; a unit it claimed since can
// only end that way too. Another process with the same instance id runs
// other units: its look says nothing of these.) Units of other replicas
// are announced through the Broadcaster, best effort: fresh bounds how late
// a lost announcement is noticed.
func (h *hub) runningKnown(account, instance, run string, now time.Time, fresh time.Duration) bool {
	if run == "" {
		// A proxy predating run ids: another process polling under its
		// instance id without one (a second old proxy of that name, a
		// token's holder) cannot be told from it, and that one's look at
		// other units must not stand in for its own. It looks every time.
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.checked[[3]string{account, instance, run}]
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

// claimEnded records how a claim for account that ended at now went: short
// when it took fewer units than it asked for, so every claimable unit.
func (h *hub) claimEnded(account string, short bool, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if short {
		h.drained[account] = now
	} else {
		delete(h.drained, account)
	}
}

// drainedRecently reports whether the latest claim for account took fewer
// units than it asked for, less than fresh before now: the queue drains as
// fast as it fills, and holds no backlog that a unit handed over could
// overtake (parkWhileClaiming).
func (h *hub) drainedRecently(account string, now time.Time, fresh time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.drained[account]
	return ok && now.Sub(at) < fresh && !now.Before(at)
}

// poller is one Poll call waiting for work.
type poller struct {
	h        *hub
	account  string
	instance string
	// poll is the proxy process's run id ("" for none) and the poll's
	// number in it, recorded with the units claimed for it.
	poll  store.ClaimPoll
	slots int // units it may take at once (its max_units)
	// accepts reports whether the poll may take a unit at now (its caller
	// is there, its token and keys are still good): one handed by an
	// enqueue that read token as the account's current token hash, or
	// (token nil) one it would claim when woken. nil: always. It is
	// called under the hub's lock.
	accepts func(now time.Time, token []byte) bool
	// silence tells how long ago its connection last delivered anything
	// (nil: not known); see quiet.
	silence func() time.Duration
	c       chan struct{} // capacity 1: a pending wake-up
	elem    *list.Element // nil while not in the waiting list

	// Units handed over (park, reserve, hand, release, take, leave),
	// guarded by h.mu.
	parked   bool         // its poll waits for a wake-up, taking nothing else
	inFlight int          // reserved for it and being stored
	handed   []store.Work // stored as claimed by it, not taken yet
	// bytes is the size of the sealed commands of the units reserved for
	// it or handed to it, not taken yet: its answer must carry them all
	// in one message (fits).
	bytes  int
	closed bool // the poll has ended: nothing more is handed to it
	// superseded: a newer poll of its run came (supersedeLocked), so its
	// connection is dead: nothing more is handed to it, and it ends. Set
	// under h.mu; its poll reads it without.
	superseded atomic.Bool
	// claiming: its own claim is under way (parkWhileClaiming until
	// claimDone): units may be handed to it, at most limit, whatever the
	// queue holds, and stored is closed (when not nil) once none
	// reserved for it is still being stored.
	claiming bool
	limit    int
	stored   chan struct{}
}

// poller registers a waiting poller that may take slots units at once
// (when accepts, if not nil, says so); the caller must Close it.
//
// A proxy process polls one poll at a time, so a poller of a run (account,
// instance and run id, when run is not empty) supersedes the run's earlier
// one, if it is still registered: that one's connection died without this
// automator hearing of it (a middlebox forgot it, a partition cut it), and
// every unit handed to it would be lost. It is woken, handed nothing more,
// and its poll ends (superseded).
//
// Polls are numbered (cp.Poll, when the proxy numbers them), because they
// need not register in the order they were sent: a poll the proxy dropped
// (one for no units, given up when a slot freed) may reach its handler
// after the poll sent next, or after another replica told of a newer one
// (supersedeRun). A poller numbered at or below the highest number of its
// run heard of here, or its run's registered poller, is that stale poll:
// it is superseded at once, and supersedes nothing.
//
// Units stored as its claims record cp, the poll they are claimed for.
func (h *hub) poller(account, instance string, cp store.ClaimPoll, slots int, accepts func(time.Time, []byte) bool, silence func() time.Duration) *poller {
	p := &poller{h: h, account: account, instance: instance, poll: cp, slots: slots, accepts: accepts, silence: silence, c: make(chan struct{}, 1)}
	if cp.Run != "" {
		h.mu.Lock()
		key := [3]string{account, instance, cp.Run}
		if cp.Poll != 0 && cp.Poll <= h.latest[key] || !h.supersedeLocked(key, cp.Poll) {
			p.superseded.Store(true)
			h.mu.Unlock()
			return p
		}
		h.runs[key] = p
		h.noteLatestLocked(key, cp.Poll)
		h.mu.Unlock()
	}
	p.rearm()
	return p
}

// supersedeRun supersedes the poller of a run, if one is registered and
// numbered below seq: the run polled another replica with poll seq
// (EventRunPolled; 0 when not numbered).
func (h *hub) supersedeRun(account, instance, run string, seq int64) {
	if run == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	key := [3]string{account, instance, run}
	h.supersedeLocked(key, seq)
	// A stale poll of the run may register here only now: it must not
	// wait either.
	h.noteLatestLocked(key, seq)
}

// noteLatestLocked records that run key made poll seq (0: not numbered).
func (h *hub) noteLatestLocked(key [3]string, seq int64) {
	if seq == 0 || seq <= h.latest[key] {
		return
	}
	if len(h.latest) >= maxChecked {
		clear(h.latest)
	}
	h.latest[key] = seq
}

// supersedeLocked supersedes the registered poller of run key, unless both
// are numbered and it is not older than poll seq of that run; false: it is
// not (seq is stale).
func (h *hub) supersedeLocked(key [3]string, seq int64) bool {
	old := h.runs[key]
	if old == nil {
		return true
	}
	if seq != 0 && old.poll.Poll >= seq {
		return false
	}
	delete(h.runs, key)
	old.superseded.Store(true)
	h.stopFillingLocked(old)
	h.signalLocked(old)
	return true
}

// newConnection records that a run polled over the connection from peer,
// and reports whether its previous poll here came over another one (or
// none did): then other replicas may hold a poll of the run on a
// connection that died unseen, and are told (EventRunPolled).
func (h *hub) newConnection(account, instance, run, peer string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := [3]string{account, instance, run}
	if h.conns[key] == peer {
		return false
	}
	if len(h.conns) >= maxChecked {
		clear(h.conns)
	}
	h.conns[key] = peer
	return true
}

// rearm puts p back at the end of its account's waiting list.
func (p *poller) rearm() {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	if p.elem != nil || p.closed || p.superseded.Load() {
		return
	}
	p.h.pushLocked(p)
}

// isSuperseded reports whether a newer poll of p's run came (poller).
func (p *poller) isSuperseded() bool { return p.superseded.Load() }

// pushLocked puts p at the end of its account's waiting list.
func (h *hub) pushLocked(p *poller) {
	l := h.pollers[p.account]
	if l == nil {
		l = list.New()
		h.pollers[p.account] = l
	}
	p.elem = l.PushBack(p)
}

// Close unregisters p at now. It returns the units handed to p that its
// poll did not take (stored as its claims, never sent: they time out);
// otherwise it passes an unconsumed wake-up to another poller.
func (p *poller) Close(now time.Time) []store.Work {
	p.h.mu.Lock()
	p.h.detachLocked(p)
	p.closed = true
	if key := [3]string{p.account, p.instance, p.poll.Run}; p.poll.Run != "" && p.h.runs[key] == p {
		delete(p.h.runs, key)
	}
	us := p.handed
	p.handed, p.bytes = nil, 0
	p.h.mu.Unlock()
	if len(us) > 0 {
		return us
	}
	select {
	case <-p.c:
		p.h.NotifyWork(p.account, 1, now)
	default:
	}
	return nil
}

// reserve picks a waiting poller of account for a unit about to be stored
// at now, when the account has nothing claimable: the latest claim found
// nothing and no unit was announced since. token is the account's current
// token hash as the enqueue read it: a poll authenticated before the token
// was rotated is passed over (pollauth.go). The unit can then be stored as
// claimed by that poller's instance and handed to it (hand): one
// transaction and no wake-up fewer, and no unit queued before it is
// overtaken. The caller must end the reservation with hand or release.
// nil: none waits, or the queue may hold units.
//
// The oldest parked poller that accepts units is picked and leaves the
// waiting list, so no wake-up takes it. (A poller between a wake-up and
// its next wait may be claiming units itself; it is passed over.) Until
// the first unit reserved for it is stored, further units go to it too, up
// to its free slots: units queued together leave together, as one claim
// would take them.
//
// A poller whose own claim is under way (parkWhileClaiming) is picked
// whatever the queue holds, for at most its limit: that claim takes the
// units queued before it.
//
// A unit another replica queued and whose announcement is late or lost
// can be overtaken: order across replicas is best effort (docs).
func (h *hub) reserve(account string, now time.Time, token []byte, size int) *poller {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen, ok := h.empty[account]
	empty := ok && seen.n == h.work[account]
	if p := h.filling[account]; p != nil && (empty || p.claiming) && p.takes(now, token) {
		if !p.fits(size) {
			// Its answer is full: it takes nothing more.
			delete(h.filling, account)
			return nil
		}
		p.inFlight++
		p.bytes += size
		if p.inFlight+len(p.handed) >= p.capacity() {
			delete(h.filling, account)
		}
		return p
	}
	l := h.pollers[account]
	if l == nil {
		return nil
	}
	var quiet *poller
	for e := l.Front(); e != nil; e = e.Next() {
		if p := e.Value.(*poller); p.parked && (empty || p.claiming) && p.capacity() > 0 && p.fits(size) && p.takes(now, token) {
			if p.quiet() {
				if quiet == nil {
					quiet = p
				}
				continue
			}
			return h.reservedLocked(p, size)
		}
	}
	if quiet != nil {
		return h.reservedLocked(quiet, size)
	}
	return nil
}

// reservedLocked takes p, picked by reserve for a unit whose sealed
// command is size bytes, out of the waiting list.
func (h *hub) reservedLocked(p *poller, size int) *poller {
	h.removeLocked(p)
	p.inFlight = 1
	p.bytes += size
	if p.capacity() > 1 {
		h.filling[p.account] = p
	}
	return p
}

// quietAfter is how long a poll's connection may go without delivering
// anything before the poll is passed over for others while they wait
// (reserve, NotifyWork): a proxy pings after 10 s without traffic, and its
// ping is answered, so a connection silent for longer most likely died
// unseen (its host lost power, a partition cut it). The poll is not shut
// out: with none other waiting, it is picked as before.
const quietAfter = 15 * time.Second

// quiet reports whether p's connection has been silent for longer than
// quietAfter.
func (p *poller) quiet() bool {
	return p.silence != nil && p.silence() > quietAfter
}

// hand gives the reserved poller p a unit stored as claimed by it; p is
// woken once no unit reserved for it is still being stored. false: p's
// poll ended meanwhile (its caller left) and the unit, its claim, can
// never be sent: it times out.
func (h *hub) hand(p *poller, w store.Work) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	p.inFlight--
	h.stopFillingLocked(p) // the first unit is in: go
	if p.closed {
		return false
	}
	p.handed = append(p.handed, w)
	h.wakeHandedLocked(p)
	return true
}

// release ends a reservation, of a unit whose sealed command is size
// bytes, that stored nothing.
func (h *hub) release(p *poller, size int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p.inFlight--
	p.bytes -= size
	if h.filling[p.account] == p && p.inFlight == 0 && len(p.handed) == 0 {
		delete(h.filling, p.account)
	}
	if !p.closed {
		h.wakeHandedLocked(p)
	}
}

// wakeHandedLocked wakes p once nothing reserved for it is being stored:
// it takes what was handed, or (with nothing handed) looks again at what
// it missed while out of the waiting list.
func (h *hub) wakeHandedLocked(p *poller) {
	if p.inFlight > 0 || h.filling[p.account] == p {
		return
	}
	if p.claiming {
		// claimDone collects them; p.c is left to wake-ups for queued
		// work, which its poll must not lose.
		if p.stored != nil {
			close(p.stored)
			p.stored = nil
		}
		return
	}
	select {
	case p.c <- struct{}{}:
	default:
	}
}

// fits reports whether a unit whose sealed command is size bytes may be
// handed to p: its answer carries the units handed to it, in one message.
// While its own claim is under way, those units share the message with
// the claim's (claimBytes, fillBytes), and none may go past fillBytes;
// otherwise they may take claimBytes, and the first always fits (any one
// command fits in a message).
func (p *poller) fits(size int) bool {
	if p.claiming {
		return p.bytes+size <= fillBytes
	}
	return p.bytes == 0 || p.bytes+size <= claimBytes
}

// capacity is how many units p may be handed at once.
func (p *poller) capacity() int {
	if p.claiming {
		return p.limit
	}
	return p.slots
}

// parkWhileClaiming lets units be handed to p, at most n, while its poll's
// own claim is under way, until claimDone: they are stored as claimed by
// its instance, as for a parked poll, instead of being queued behind the
// claim for another claim to take. The claim must ask for at most p's
// slots less n.
//
// Under a steady flow of units this keeps a claim from leaving the queue
// non-empty behind it: without it, each unit queued during a claim made
// the next poll claim again, and a handover (reserve) waits for a claim
// that finds the queue empty, which such a flow seldom leaves time for.
func (p *poller) parkWhileClaiming(n int) {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	p.parked, p.claiming, p.limit = true, true, n
}

// claimDone ends parkWhileClaiming: no unit is reserved for p any more. It
// waits until the units reserved for it are stored (or ctx is done) and
// returns those handed to it. p stays registered for its poll's next wait.
func (p *poller) claimDone(ctx context.Context) []store.Work {
	h := p.h
	h.mu.Lock()
	defer h.mu.Unlock()
	p.parked = false
	h.stopFillingLocked(p)
	for p.inFlight > 0 && ctx.Err() == nil {
		stored := make(chan struct{})
		p.stored = stored
		h.mu.Unlock()
		select {
		case <-stored:
		case <-ctx.Done():
		}
		h.mu.Lock()
	}
	p.claiming, p.limit, p.stored = false, 0, nil
	us := p.handed
	p.handed, p.bytes = nil, 0
	if p.elem == nil && !p.closed && !p.superseded.Load() && len(p.c) == 0 {
		// reserve took it out of the waiting list (a wake-up would have
		// left a token, and its poll rearms on that): back in place,
		// should its poll wait again.
		h.pushLocked(p)
	}
	return us
}

// takes reports whether p may take a unit at now: handed one by an
// enqueue that read token as the account's current token hash, or (token
// nil) claim one when woken.
func (p *poller) takes(now time.Time, token []byte) bool {
	return !p.superseded.Load() && (p.accepts == nil || p.accepts(now, token))
}

// wake wakes p's poll if it waits in the waiting list; one that a unit is
// being handed to is woken by the hand-over.
func (p *poller) wake() {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	if p.elem != nil {
		p.h.signalLocked(p)
	}
}

// park marks p's poll as about to wait for a wake-up: from now until take
// or leave, units may be reserved for it.
func (p *poller) park() {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	p.parked = true
}

// leave takes p out of the waiting list for good and waits until no unit
// reserved for it is still being stored, or ctx is done: a poll whose
// window ends still answers with the units stored as its claims.
func (p *poller) leave(ctx context.Context) {
	h := p.h
	h.mu.Lock()
	p.parked = false
	h.detachLocked(p)
	if hook := h.testHookLeft; hook != nil {
		n := p.inFlight
		h.mu.Unlock()
		hook(p.account, p.instance, n)
		h.mu.Lock()
	}
	for p.inFlight > 0 {
		h.mu.Unlock()
		select {
		case <-p.c:
		case <-ctx.Done():
			return
		}
		h.mu.Lock()
	}
	h.mu.Unlock()
}

// take returns the units handed to p, if any, and forgets them; p's poll
// is no longer parked.
func (p *poller) take() []store.Work {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	p.parked = false
	us := p.handed
	p.handed, p.bytes = nil, 0
	return us
}

// detachLocked takes p out of the waiting list and stops handing it more
// units (reserve).
func (h *hub) detachLocked(p *poller) {
	h.removeLocked(p)
	h.stopFillingLocked(p)
}

// stopFillingLocked ends the reservations of further units for p.
func (h *hub) stopFillingLocked(p *poller) {
	if h.filling[p.account] == p {
		delete(h.filling, p.account)
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

// NotifyWork wakes up to n waiting pollers of account that take units at
// now, oldest first, those whose connection went quiet last. (A poll with
// no free slot only waits to hear of its units' cancels, and one whose
// caller left or whose token or keys expired claims nothing: a wake-up
// spent on either would be lost. One woken that finds it cannot take
// passes the wake-up on, as Close does.)
func (h *hub) NotifyWork(account string, n int, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.work[account]++
	delete(h.empty, account)
	for _, quiet := range []bool{false, true} {
		l := h.pollers[account]
		if l == nil {
			return
		}
		for e := l.Front(); e != nil && n > 0; {
			p := e.Value.(*poller)
			e = e.Next()
			if p.slots > 0 && (quiet || !p.quiet()) && p.takes(now, nil) {
				h.signalLocked(p)
				n--
			}
		}
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

// NotifyAccount wakes every waiting poller of account: it was deleted, and
// each, looking its token up again, is refused.
func (h *hub) NotifyAccount(account string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.pollers[account]
	if l == nil {
		return
	}
	var all []*poller
	for e := l.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*poller))
	}
	for _, p := range all {
		h.signalLocked(p)
	}
}

// resumed is told that events of other replicas may have been missed
// (EventResumed): every waiting caller is woken to read its unit again, and
// no earlier look at a proxy process's running units stands in for a new
// one.
func (h *hub) resumed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, subs := range h.done {
		for s := range subs {
			s.ended = nil
			close(s.c)
		}
		delete(h.done, id)
	}
	clear(h.checked)
	h.checkedTold = 0
}

// forgetAccount drops the counts and records the hub keeps per account,
// for an account deleted a while ago (Server.accountGone): its polls have
// all ended, and its waiting callers were woken. A record missing is what a
// restart leaves: the next poll of the name looks at the store.
func (h *hub) forgetAccount(account string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.work, account)
	delete(h.empty, account)
	delete(h.cut, account)
	delete(h.drained, account)
	for k, c := range h.checked {
		if k[0] == account {
			h.checkedTold -= len(c.told)
			delete(h.checked, k)
		}
	}
	for k := range h.latest {
		if k[0] == account {
			delete(h.latest, k)
		}
	}
	for k := range h.conns {
		if k[0] == account {
			delete(h.conns, k)
		}
	}
}

// waiting reports how many pollers of account wait (for tests).
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
