//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The fault kinds, as the summary table names them.
const (
	kindProxyKill       = "proxy-kill"            // SIGKILL one instance, restart it
	kindProxyKillPair   = "proxy-kill-pair"       // SIGKILL two at once, restart them
	kindProxyKillGroup  = "proxy-kill-group"      // SIGKILL all but one, restart them
	kindAutomatorKill   = "automator-kill"        // SIGKILL the automator, restart it
	kindProxyPause      = "proxy-pause"           // SIGSTOP an instance, SIGCONT it later
	kindFailover        = "standby-failover"      // SIGKILL the active for good, start the warm standby
	kindNetDrop         = "net-drop"              // reset an instance's connections
	kindNetBlackhole    = "net-blackhole"         // partition an instance, then reset what it stalled
	kindNetIdleCut      = "net-idle-cut"          // a middlebox silently forgets open connections
	kindNetLatency      = "net-latency"           // add latency for a while
	kindConnectRestart  = "connect-proxy-restart" // kill the outbound CONNECT proxy, start it again
	kindCutPoll         = "cut-poll-response"     // cut a Poll response carrying claims
	kindCutCompleteReq  = "cut-complete-request"  // cut a Complete or CompleteBatch before the automator reads it
	kindCutCompleteResp = "cut-complete-response" // cut the answer to a Complete or CompleteBatch

	// With replicas on PostgreSQL (TestChaosPG), instead of automator-kill:
	kindReplicaKill    = "replica-kill"     // SIGKILL one replica, restart it
	kindReplicaNetDrop = "replica-net-drop" // reset every proxy connection to one replica
	kindPGCrash        = "postgres-crash"   // pg_ctl restart -m immediate: PostgreSQL crashes and recovers
	kindPGStop         = "postgres-stop"    // pg_ctl stop -m fast, start it again a little later
	// A hung replica: SIGSTOP, SIGCONT a few seconds later (up to longer
	// than the proxies' and the Go client's keepalives take to notice).
	kindReplicaPause = "replica-pause"
	// The replica keeps its proxies and callers but cannot reach
	// PostgreSQL: its relay to the database black-holes everything, then
	// resets what it stalled.
	kindReplicaPGPartition = "replica-pg-partition"
	// The callers' side, through the relays between callers and replicas:
	kindCallerNetDrop   = "caller-net-drop"   // reset every caller connection to one replica
	kindCallerCutWait   = "caller-cut-wait"   // cut a Wait answer that carries the unit's end
	kindCallerCutSubmit = "caller-cut-submit" // cut a Submit answer (the unit is queued)
)

// Bounds of the schedule and of waits for recovery.
const (
	// cutWindow: how long an armed cut waits for a matching call.
	cutWindow = 8 * time.Second
	// expectCut is what the plan reckons a cut takes to be made.
	expectCut = 2 * time.Second
	// noticeBound: a dead connection must be noticed (and dialled again)
	// within this; the keepalive makes it about 15s.
	noticeBound = 40 * time.Second
	// expectNotice is what the plan reckons noticing takes.
	expectNotice        = 16 * time.Second
	restartPollingBound = 40 * time.Second
	// connectRestartTarget is the instance that reaches the automator
	// through the CONNECT proxy.
	connectRestartTarget = "pc"
)

// allKinds is every fault kind; each run injects each at least once.
var allKinds = []string{
	kindProxyKill, kindProxyKillPair, kindProxyKillGroup, kindAutomatorKill, kindProxyPause, kindFailover,
	kindNetDrop, kindNetBlackhole, kindNetIdleCut, kindNetLatency, kindConnectRestart,
	kindCutPoll, kindCutCompleteReq, kindCutCompleteResp,
}

// pgKinds is every fault kind of a run with replicas on PostgreSQL: the
// proxies' and the network's as with one automator, and, instead of the
// automator's crash, the faults of one replica and of PostgreSQL itself.
var pgKinds = append(slices.DeleteFunc(slices.Clone(allKinds), func(k string) bool { return k == kindAutomatorKill }),
	kindReplicaKill, kindReplicaNetDrop, kindPGCrash, kindPGStop, kindReplicaPause, kindReplicaPGPartition,
	kindCallerNetDrop, kindCallerCutWait, kindCallerCutSubmit)

// kindWeights: how often each kind is drawn after the first round.
var kindWeights = map[string]int{
	kindProxyKill: 12, kindProxyKillPair: 5, kindProxyKillGroup: 3, kindAutomatorKill: 5, kindProxyPause: 8,
	kindFailover: 4, kindNetDrop: 8, kindNetBlackhole: 6, kindNetIdleCut: 4, kindNetLatency: 6,
	kindConnectRestart: 4, kindCutPoll: 10, kindCutCompleteReq: 8, kindCutCompleteResp: 8,
	kindReplicaKill: 6, kindReplicaNetDrop: 5, kindPGCrash: 3, kindPGStop: 2,
	kindReplicaPause: 4, kindReplicaPGPartition: 4, kindCallerNetDrop: 5, kindCallerCutWait: 6, kindCallerCutSubmit: 5,
}

// topology is the set of instances (and replicas) a schedule targets.
type topology struct {
	always []string  // active all run long (restarted after crashes)
	pair   [2]string // active/passive: pair[0] active, pair[1] the warm standby
	// replicas of the automator on PostgreSQL; none: one automator, and the
	// kinds are allKinds, else pgKinds.
	replicas []string
}

// kinds are the fault kinds of the topology's run.
func (top topology) kinds() []string {
	if len(top.replicas) > 0 {
		return pgKinds
	}
	return allKinds
}

// planParams shape a schedule.
type planParams struct {
	gap          time.Duration // mean time between faults
	maxPause     time.Duration // longest SIGSTOP
	maxBlackhole time.Duration // longest partition
	// With replicas: the longest SIGSTOP of a replica and the longest
	// partition of one from PostgreSQL.
	maxReplicaPause, maxPGPartition time.Duration
	// recovery: the plan leaves an instance alone this long after a fault
	// on it has healed.
	recovery time.Duration
}

// planned is one fault of the schedule.
type planned struct {
	At      time.Duration // after the run's start
	Kind    string
	Targets []string // for a failover: the active, then the standby
	// Via is the replica whose caller connections caller-net-drop resets.
	Via     string
	Hold    time.Duration
	Latency time.Duration
}

func (p planned) String() string {
	s := fmt.Sprintf("%7.2fs %-22s %v", p.At.Seconds(), p.Kind, p.Targets)
	if p.Via != "" {
		s += " via " + p.Via
	}
	if p.Hold > 0 {
		s += fmt.Sprintf(" hold %v", p.Hold.Round(time.Millisecond))
	}
	if p.Latency > 0 {
		s += fmt.Sprintf(" latency %v", p.Latency.Round(time.Millisecond))
	}
	return s
}

// plan draws the schedule of a run from its seed alone, so a seed replays
// the same faults at the same moments against the same instances. The
// first faults are every kind once (a group kill, then the others in a
// random order); then kinds are drawn by weight. It never plans a fault that would leave no active
// instance untouched (the survivors must pick up unclaimed work), never
// two faults on one instance within the recovery time, never two
// automator crashes at once. With replicas: never a replica fault while
// another replica or PostgreSQL is faulted, never a PostgreSQL fault while a
// replica is.
func plan(seed uint64, dur time.Duration, pp planParams, top topology) []planned {
	gap := pp.gap
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	busy := map[string]time.Duration{}
	active := 0 // index in top.pair of the active one
	// The group kill goes first: it needs every active instance free.
	kinds := top.kinds()
	first := slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == kindProxyKillGroup })
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	first = append([]string{kindProxyKillGroup}, first...)
	var weighted []string
	for _, k := range kinds {
		for range kindWeights[k] {
			weighted = append(weighted, k)
		}
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }

	// try plans kind at t, if it can be.
	try := func(kind string, t time.Duration) (planned, bool) {
		actives := append(slices.Clone(top.always), top.pair[active])
		var free []string
		for _, in := range actives {
			if busy[in] <= t {
				free = append(free, in)
			}
		}
		rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
		p := planned{At: t, Kind: kind}
		switch kind {
		case kindAutomatorKill:
			p.Targets, p.Hold = []string{Automator}, between(300*time.Millisecond, 2500*time.Millisecond)
			return p, busy[Automator] <= t
		case kindProxyKill, kindProxyPause, kindNetDrop, kindNetBlackhole, kindNetIdleCut, kindNetLatency, kindCutPoll, kindCutCompleteReq, kindCutCompleteResp:
			if len(free) < 2 {
				return p, false
			}
			p.Targets = free[:1]
			switch kind {
			case kindProxyKill:
				p.Hold = between(200*time.Millisecond, 3*time.Second)
			case kindProxyPause:
				p.Hold = between(500*time.Millisecond, pp.maxPause)
			case kindNetBlackhole:
				p.Hold = between(time.Second, pp.maxBlackhole)
			case kindNetLatency:
				p.Hold, p.Latency = between(2*time.Second, 8*time.Second), between(50*time.Millisecond, 400*time.Millisecond)
			case kindNetIdleCut:
				p.Hold = expectNotice
			case kindCutPoll, kindCutCompleteReq, kindCutCompleteResp:
				p.Hold = expectCut
			}
			return p, true
		case kindProxyKillPair:
			if len(free) < 3 {
				return p, false
			}
			p.Targets, p.Hold = free[:2], between(200*time.Millisecond, 3*time.Second)
			return p, true
		case kindProxyKillGroup:
			if len(free) < 4 {
				return p, false
			}
			p.Targets, p.Hold = free[:len(free)-1], between(200*time.Millisecond, 3*time.Second)
			return p, true
		case kindFailover:
			act, standby := top.pair[active], top.pair[1-active]
			p.Targets, p.Hold = []string{act, standby}, between(500*time.Millisecond, 2*time.Second)
			return p, busy[act] <= t && busy[standby] <= t && len(free) >= 2
		case kindConnectRestart:
			p.Targets, p.Hold = []string{connectRestartTarget}, between(500*time.Millisecond, 4*time.Second)
			return p, len(free) >= 2 && slices.Contains(free, connectRestartTarget)
		case kindCallerNetDrop, kindCallerCutWait, kindCallerCutSubmit:
			p.Targets = []string{Callers}
			if via := top.replicas[rng.IntN(len(top.replicas))]; kind == kindCallerNetDrop {
				p.Via = via
			} else {
				p.Hold = expectCut
			}
			return p, busy[Callers] <= t
		case kindReplicaKill, kindReplicaNetDrop, kindReplicaPause, kindReplicaPGPartition:
			var freeReplicas []string
			for _, r := range top.replicas {
				if busy[r] <= t {
					freeReplicas = append(freeReplicas, r)
				}
			}
			if busy[Automator] > t || len(freeReplicas) < len(top.replicas) || len(freeReplicas) == 0 {
				return p, false
			}
			p.Targets = []string{freeReplicas[rng.IntN(len(freeReplicas))]}
			switch kind {
			case kindReplicaKill:
				p.Hold = between(300*time.Millisecond, 2500*time.Millisecond)
			case kindReplicaPause:
				p.Hold = between(2*time.Second, pp.maxReplicaPause)
			case kindReplicaPGPartition:
				p.Hold = between(time.Second, pp.maxPGPartition)
			}
			return p, true
		case kindPGCrash, kindPGStop:
			for _, r := range top.replicas {
				if busy[r] > t {
					return p, false
				}
			}
			// A crash's hold is what the plan reckons recovery takes.
			p.Targets, p.Hold = []string{Automator}, 2*time.Second
			if kind == kindPGStop {
				p.Hold = between(time.Second, 4*time.Second)
			}
			return p, busy[Automator] <= t
		}
		return p, false
	}

	var out []planned
	t := between(gap/2, gap)
	for t < dur {
		var p planned
		ok := false
		if len(first) > 0 {
			for i, kind := range first {
				if p, ok = try(kind, t); ok {
					first = slices.Delete(first, i, i+1)
					break
				}
			}
		} else {
			for range 10 {
				if p, ok = try(weighted[rng.IntN(len(weighted))], t); ok {
					break
				}
			}
		}
		if !ok {
			t += 500 * time.Millisecond
			continue
		}
		for _, in := range p.Targets {
			busy[in] = t + p.Hold + pp.recovery
		}
		if p.Kind == kindFailover {
			active = 1 - active
		}
		out = append(out, p)
		t += between(gap/2, gap*3/2)
	}
	return out
}

// injector carries out a schedule against a cluster and records what it
// did, when.
type injector struct {
	t         *testing.T
	start     time.Time
	auto      *automator
	instances map[string]*instance
	relays    map[string]*Relay
	cuts      map[string]chan Cut // per instance, from its relay
	connect   *ConnectProxy
	// With replicas on PostgreSQL: the replicas by name, and the database.
	replicas map[string]*automator
	pg       *pgServer
	// Per replica: its relay to PostgreSQL, and the relay its callers'
	// connections go through (their cuts come on callerCuts).
	pgRelays, callerRelays map[string]*Relay
	callerCuts             chan Cut
	// afterAutomatorRestart runs once the automator serves again (the
	// callers' connections retry at once instead of backing off).
	afterAutomatorRestart func()

	mu       sync.Mutex
	locks    map[string]*sync.Mutex
	faults   []Fault
	idle     []Interval
	idleFrom map[string]time.Time
	noticed  []time.Duration // dead connections: stalled → redialled
	skipped  []string
	wg       sync.WaitGroup
}

func (j *injector) lock(targets []string) func() {
	names := slices.Clone(targets)
	sort.Strings(names)
	var held []*sync.Mutex
	for _, n := range names {
		j.mu.Lock()
		m := j.locks[n]
		if m == nil {
			m = &sync.Mutex{}
			j.locks[n] = m
		}
		j.mu.Unlock()
		m.Lock()
		held = append(held, m)
	}
	return func() {
		for _, m := range held {
			m.Unlock()
		}
	}
}

func (j *injector) record(f Fault) {
	j.mu.Lock()
	j.faults = append(j.faults, f)
	j.mu.Unlock()
}

func (j *injector) skip(p planned, why string) {
	j.mu.Lock()
	j.skipped = append(j.skipped, fmt.Sprintf("%v: %s", p, why))
	j.mu.Unlock()
}

func (j *injector) setIdle(who string, idle bool, at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if idle {
		j.idleFrom[who] = at
		return
	}
	if from, ok := j.idleFrom[who]; ok {
		j.idle = append(j.idle, Interval{Who: who, Start: from, End: at})
		delete(j.idleFrom, who)
	}
}

// Run injects the schedule until ctx ends, then waits for every fault in
// progress to heal.
func (j *injector) Run(ctx context.Context, schedule []planned) {
	for _, p := range schedule {
		t := time.NewTimer(time.Until(j.start.Add(p.At)))
		select {
		case <-ctx.Done():
			t.Stop()
			j.wg.Wait()
			return
		case <-t.C:
		}
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			j.inject(p)
		}()
	}
	j.wg.Wait()
}

// Result returns the faults and idle intervals recorded; open idle
// intervals last until the end.
func (j *injector) Result() ([]Fault, []Interval) {
	j.mu.Lock()
	defer j.mu.Unlock()
	idle := slices.Clone(j.idle)
	for who, from := range j.idleFrom {
		idle = append(idle, Interval{Who: who, Start: from})
	}
	faults := slices.Clone(j.faults)
	sort.Slice(faults, func(a, b int) bool { return faults[a].Start.Before(faults[b].Start) })
	return faults, idle
}

// callerRelay is the callers' relay to replica via, or, when no caller
// connection goes through it now, the one that carries the most: each Go
// client starts a call with the address that last answered it, so after a
// replica's fault the callers gather on the others until the next fault
// moves them on.
func (j *injector) callerRelay(via string) *Relay {
	r := j.callerRelays[via]
	if r.Links() > 0 {
		return r
	}
	for _, o := range j.callerRelays {
		if o.Links() > r.Links() {
			r = o
		}
	}
	return r
}

func (j *injector) inject(p planned) {
	unlock := j.lock(p.Targets)
	defer unlock()
	switch p.Kind {
	case kindAutomatorKill:
		start := time.Now()
		j.auto.Kill()
		time.Sleep(p.Hold)
		if err := j.auto.Serve(); err != nil {
			j.t.Errorf("restarting the automator: %v", err)
		}
		if j.afterAutomatorRestart != nil {
			j.afterAutomatorRestart()
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindReplicaKill:
		a := j.replicas[p.Targets[0]]
		start := time.Now()
		a.Kill()
		time.Sleep(p.Hold)
		if err := a.Serve(); err != nil {
			j.t.Errorf("restarting replica %s: %v", a.ReplicaID, err)
		}
		if j.afterAutomatorRestart != nil {
			j.afterAutomatorRestart()
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindReplicaNetDrop:
		a := j.replicas[p.Targets[0]]
		start := time.Now()
		n := 0
		for _, r := range j.relays {
			n += r.DropTo(a.Addr())
		}
		if n == 0 {
			j.skip(p, "no proxy connection to drop")
			return
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: start})

	case kindReplicaPause:
		a := j.replicas[p.Targets[0]]
		pr := a.Proc()
		if pr == nil || pr.Exited() {
			j.skip(p, "not running")
			return
		}
		start := time.Now()
		if err := pr.Signal(syscall.SIGSTOP); err != nil {
			j.skip(p, err.Error())
			return
		}
		time.Sleep(p.Hold)
		if err := pr.Signal(syscall.SIGCONT); err != nil {
			j.t.Errorf("SIGCONT to replica %s: %v", a.ReplicaID, err)
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindReplicaPGPartition:
		r := j.pgRelays[p.Targets[0]]
		start := time.Now()
		r.Partition(true)
		time.Sleep(p.Hold)
		r.Partition(false)
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindCallerNetDrop:
		start := time.Now()
		if n := j.callerRelay(p.Via).DropAll(); n == 0 {
			j.skip(p, "no caller connection to drop")
			return
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: start})

	case kindCallerCutWait, kindCallerCutSubmit:
		kind := CutWaitResponse
		if p.Kind == kindCallerCutSubmit {
			kind = CutSubmitResponse
		}
		// Armed on every replica's relay, taken by the first matching
		// answer: the callers' calls gather where their clients last got
		// an answer.
		for _, r := range j.callerRelays {
			r.Arm(kind)
		}
		t := time.NewTimer(cutWindow)
		defer t.Stop()
		var cuts []Cut
		select {
		case c := <-j.callerCuts:
			cuts = append(cuts, c)
		case <-t.C:
		}
		taken := 0
		for _, r := range j.callerRelays {
			if !r.Disarm(kind) {
				taken++
			}
		}
		for len(cuts) < taken {
			cuts = append(cuts, <-j.callerCuts) // taken meanwhile
		}
		if len(cuts) == 0 {
			j.skip(p, "no matching call within the window")
			return
		}
		for _, c := range cuts {
			j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: c.At, End: c.At, WorkIDs: c.WorkIDs, State: c.State})
		}

	case kindPGCrash:
		start := time.Now()
		if err := j.pg.crash(); err != nil {
			j.t.Errorf("PostgreSQL did not restart after a crash: %v", err)
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindPGStop:
		start := time.Now()
		if err := j.pg.stop(); err != nil {
			j.t.Errorf("stopping PostgreSQL: %v", err)
		}
		time.Sleep(p.Hold)
		if err := j.pg.start(); err != nil {
			j.t.Errorf("starting PostgreSQL again: %v", err)
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindProxyKill, kindProxyKillPair, kindProxyKillGroup:
		var running []*instance
		for _, id := range p.Targets {
			if in := j.instances[id]; in.Running() {
				running = append(running, in)
			}
		}
		if len(running) == 0 {
			j.skip(p, "no target is running")
			return
		}
		start := time.Now()
		var targets []string
		for _, in := range running {
			in.Kill()
			targets = append(targets, in.ID)
		}
		time.Sleep(p.Hold)
		var wg sync.WaitGroup
		for _, in := range running {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Guarantee 5: it simply resumes polling.
				if err := in.StartPolling(restartPollingBound); err != nil {
					j.t.Errorf("%s did not resume polling after a restart: %v", in.ID, err)
				}
			}()
		}
		wg.Wait()
		j.record(Fault{Kind: p.Kind, Targets: targets, Start: start, End: time.Now()})

	case kindProxyPause:
		in := j.instances[p.Targets[0]]
		if !in.Running() {
			j.skip(p, "not running")
			return
		}
		start := time.Now()
		if err := in.Signal(syscall.SIGSTOP); err != nil {
			j.skip(p, err.Error())
			return
		}
		time.Sleep(p.Hold)
		_ = in.Signal(syscall.SIGCONT)
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindFailover:
		act, standby := j.instances[p.Targets[0]], j.instances[p.Targets[1]]
		if !act.Running() || standby.Running() {
			j.skip(p, "the pair is not active/standby")
			return
		}
		start := time.Now()
		act.Kill()
		j.setIdle(act.ID, true, time.Now())
		time.Sleep(p.Hold) // the failover's detection, by a person or a monitor
		polling, err := standby.Start()
		j.setIdle(standby.ID, false, time.Now())
		if err == nil {
			err = await(standby.Proc(), polling, restartPollingBound)
		}
		if err != nil {
			j.t.Errorf("the warm standby %s did not take over: %v", standby.ID, err)
		}
		j.record(Fault{Kind: p.Kind, Targets: []string{act.ID}, Start: start, End: time.Now()})

	case kindNetDrop:
		start := time.Now()
		n := j.relays[p.Targets[0]].DropAll()
		if n == 0 {
			j.skip(p, "no connection to drop")
			return
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: start})

	case kindNetBlackhole:
		r := j.relays[p.Targets[0]]
		start := time.Now()
		r.Partition(true)
		time.Sleep(p.Hold)
		r.Partition(false)
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindNetIdleCut:
		r := j.relays[p.Targets[0]]
		before := r.Accepted()
		redialled := r.AcceptedAbove(before)
		start := time.Now()
		if n, _ := r.StallExisting(); n == 0 {
			j.skip(p, "no connection to stall")
			return
		}
		t := time.NewTimer(noticeBound)
		defer t.Stop()
		select {
		case <-redialled:
			j.mu.Lock()
			j.noticed = append(j.noticed, time.Since(start))
			j.mu.Unlock()
		case <-t.C:
			j.t.Errorf("%s did not notice a dead connection within %v", p.Targets[0], noticeBound)
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindNetLatency:
		r := j.relays[p.Targets[0]]
		start := time.Now()
		r.SetLatency(p.Latency)
		time.Sleep(p.Hold)
		r.SetLatency(0)
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindConnectRestart:
		in := j.instances[connectRestartTarget]
		if !in.Running() {
			j.skip(p, "not running")
			return
		}
		reconnected := in.Proc().Watch("connected to the automator; polling")
		start := time.Now()
		j.connect.Kill()
		time.Sleep(p.Hold)
		if err := j.connect.Start(); err != nil {
			j.t.Errorf("starting the CONNECT proxy again: %v", err)
		}
		if err := await(in.Proc(), reconnected, restartPollingBound); err != nil {
			j.t.Errorf("%s did not reconnect through the restarted CONNECT proxy: %v", in.ID, err)
		}
		j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: start, End: time.Now()})

	case kindCutPoll, kindCutCompleteReq, kindCutCompleteResp:
		kind := map[string]CutKind{kindCutPoll: CutPollResponse, kindCutCompleteReq: CutCompleteRequest, kindCutCompleteResp: CutCompleteResponse}[p.Kind]
		id := p.Targets[0]
		r, cuts := j.relays[id], j.cuts[id]
		r.Arm(kind)
		t := time.NewTimer(cutWindow)
		defer t.Stop()
		select {
		case c := <-cuts:
			j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: c.At, End: c.At, WorkIDs: c.WorkIDs})
		case <-t.C:
			if r.Disarm(kind) {
				j.skip(p, "no matching call within the window")
				return
			}
			c := <-cuts // taken just now
			j.record(Fault{Kind: p.Kind, Targets: p.Targets, Start: c.At, End: c.At, WorkIDs: c.WorkIDs})
		}
	}
}
