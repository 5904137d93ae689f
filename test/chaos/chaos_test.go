//go:build linux

package chaos

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/config"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

var (
	flagDir      = flag.String("chaos.dir", "", "keep the run's logs, execution log and data directory here (default: a temporary directory, removed)")
	flagStore    = flag.String("chaos.store", "sqlite", "the long run's store: sqlite (one automator) or pg (replicas on one PostgreSQL database, TestChaosPG)")
	flagReplicas = flag.Int("chaos.replicas", 0, "replicas of the automator in TestChaosPG (default 2 short, 3 long)")
)

// shortSeed is the fixed seed of the short run in `make test`.
const shortSeed = 20261130

// pgShortDuration is the short run's duration on PostgreSQL: its schedule
// has more kinds to inject at least once.
const pgShortDuration = 50 * time.Second

// The shapes of the schedules of the short and the long run. A replica's
// SIGSTOP lasts up to 8s in the short run; in the long one up to 40s,
// longer than the proxies' keepalive (15s) and the Go client's (30s) take
// to give up a silent connection.
var (
	shortPlan = planParams{gap: 1500 * time.Millisecond, maxPause: 8 * time.Second, maxBlackhole: 5 * time.Second, recovery: 3 * time.Second,
		maxReplicaPause: 8 * time.Second, maxPGPartition: 6 * time.Second}
	longPlan = planParams{gap: 3 * time.Second, maxPause: 12 * time.Second, maxBlackhole: 10 * time.Second, recovery: 6 * time.Second,
		maxReplicaPause: 40 * time.Second, maxPGPartition: 25 * time.Second}
)

// runConfig is the shape of a chaos run.
type runConfig struct {
	long     bool
	pg       bool // replicas on PostgreSQL (TestChaosPG)
	replicas int
	seed     uint64
	duration time.Duration // callers submit this long
	atLeast  int           // and on until this many units were acknowledged
	callers  int
	plan     planParams
	// Timeouts of ordinary units.
	minTimeout, maxTimeout time.Duration
}

func chaosConfig() runConfig {
	c := runConfig{
		long: *flagLong, seed: *flagSeed, duration: 40 * time.Second, callers: 16,
		plan:       shortPlan,
		minTimeout: 6 * time.Second, maxTimeout: 12 * time.Second,
	}
	if c.long {
		c.duration, c.atLeast, c.callers, c.minTimeout, c.maxTimeout = 6*time.Minute, 20000, 32, 8*time.Second, 16*time.Second
		c.plan = longPlan
		if c.seed == 0 {
			var b [8]byte
			_, _ = rand.Read(b[:])
			c.seed = binary.LittleEndian.Uint64(b[:]) % 1e9
		}
	} else if c.seed == 0 {
		c.seed = shortSeed
	}
	if *flagDuration > 0 {
		c.duration = *flagDuration
	}
	if *flagUnits > 0 {
		c.atLeast = *flagUnits
	}
	if *flagCallers > 0 {
		c.callers = *flagCallers
	}
	return c
}

func (c runConfig) replay() string {
	if c.pg {
		if c.long {
			return fmt.Sprintf("make chaos CHAOS_STORE=pg CHAOS_SEED=%d", c.seed)
		}
		return fmt.Sprintf("go test ./test/chaos -run '^TestChaosPG$' -v -count=1 -args -chaos.store=pg -chaos.seed=%d", c.seed)
	}
	if c.long {
		return fmt.Sprintf("make chaos CHAOS_SEED=%d", c.seed)
	}
	return fmt.Sprintf("go test ./test/chaos -run '^TestChaos$' -v -count=1 -args -chaos.seed=%d", c.seed)
}

// TestChaos runs a real automator and six real proxy instances of one
// account, behind fault-injecting relays (one instance reaches the
// automator only through an outbound HTTP CONNECT proxy; two form an
// active/passive pair, the second a warm standby), drives concurrent
// executeOnProxy callers, injects every kind of fault from the seeded
// schedule, and checks the history against the guarantees.
//
// Short (make test): fixed seed, 40s of faults. Long (make chaos):
// -chaos.long, a random seed, 6 minutes and at least 20,000 units.
func TestChaos(t *testing.T) {
	rc := chaosConfig()
	binaries(t)
	runChaos(t, rc)
}

// TestChaosPG is TestChaos with replicas of the automator (2 in the short
// run, 3 in the long one, or -chaos.replicas) on one PostgreSQL database, a
// throwaway cluster of its own: each proxy instance reaches them through
// its relay, which sends each connection to the instance's home replica
// (instances are spread over the replicas) or, while that one is down or
// its /readyz fails, to the next, as a layer-4 load balancer with health
// checks does; each replica reaches PostgreSQL through a relay of its own.
// Each caller has a Go client (automator/client) given every replica's
// address, through a relay per replica, its own replica first. Instead of
// the automator's crash, the schedule SIGKILLs one replica (restarted a
// little later), SIGSTOPs one (a hung replica, up to 40 s), cuts one off
// from PostgreSQL, resets every proxy connection to one, crashes PostgreSQL
// (pg_ctl restart -m immediate) and stops it for a few seconds; and it
// resets the callers' connections to one replica and cuts a Submit answer
// and a Wait answer that carries a unit's end. The history is checked
// against the same guarantees.
//
// `make chaos CHAOS_STORE=pg` runs it long (-chaos.long); `make test` runs
// the short one (CHAOS_STORE=pg in its environment). Without either it is
// skipped (see docs/failure-semantics.md). It runs after TestChaos, not
// beside it: side by side on a loaded 2-core machine, callers of this run
// saw timeouts up to 8 s after their deadline, past what the checker allows.
func TestChaosPG(t *testing.T) {
	if *flagStore != "pg" && os.Getenv("CHAOS_STORE") != "pg" {
		t.Skip("the chaos run on PostgreSQL replicas runs with -chaos.store=pg or CHAOS_STORE=pg in the environment (make chaos CHAOS_STORE=pg; make test sets it)")
	}
	rc := chaosConfig()
	rc.pg, rc.replicas = true, *flagReplicas
	if rc.replicas == 0 {
		rc.replicas = 2
		if rc.long {
			rc.replicas = 3
		}
	}
	rc.replicas = max(2, rc.replicas)
	if !rc.long && *flagDuration == 0 {
		rc.duration = pgShortDuration
	}
	binaries(t)
	runChaos(t, rc)
}

// runChaos is a chaos run: the cluster rc asks for, its faults, its
// callers, the check.
func runChaos(t *testing.T, rc runConfig) {
	store := "SQLite"
	if rc.pg {
		store = fmt.Sprintf("PostgreSQL, %d replicas", rc.replicas)
	}
	fmt.Printf("chaos: seed %d, %v of faults, %d callers, long=%v, %s\nchaos: replay with: %s\n", rc.seed, rc.duration, rc.callers, rc.long, store, rc.replay())
	dir := *flagDir
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	// autos: the automator, or its replicas.
	var autos []*automator
	var pg *pgServer
	var replicaIDs []string
	pgRelays, callerRelays := map[string]*Relay{}, map[string]*Relay{}
	callerCuts := make(chan Cut, 8)
	if rc.pg {
		pg = startPG(t)
		autos = newReplicas(t, dir, pg.URL, rc.replicas)
		for _, a := range autos {
			replicaIDs = append(replicaIDs, a.ReplicaID)
			// Each replica reaches PostgreSQL through a relay of its own,
			// which a partition black-holes; its callers reach it through
			// another, which cuts their connections and answers.
			r, err := NewRelay(pg.addr(t), false, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			a.DB, pgRelays[a.ReplicaID] = viaRelay(t, pg.URL, r.Addr()), r
			cr, err := NewRelay(a.Addr(), true, func(c Cut) {
				select {
				case callerCuts <- c:
				default:
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cr.Close)
			callerRelays[a.ReplicaID] = cr
		}
	} else {
		autos = []*automator{newAutomator(t, dir, "127.0.0.1", true)}
	}
	for _, a := range autos {
		if err := a.Serve(); err != nil {
			t.Fatal(err)
		}
	}
	auto := autos[0]
	profile := auto.CreateAccount("acme")
	scripts := writeScripts(t, dir)
	execLog := filepath.Join(dir, "exec.log")
	connect, err := NewConnectProxy(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(connect.Close)

	top := topology{always: []string{"p1", "p2", "p3", connectRestartTarget}, pair: [2]string{"p4", "sb"}, replicas: replicaIDs}
	all := append(slices.Clone(top.always), top.pair[:]...)
	j := &injector{
		t: t, auto: auto, connect: connect, pg: pg, replicas: map[string]*automator{},
		pgRelays: pgRelays, callerRelays: callerRelays, callerCuts: callerCuts,
		instances: map[string]*instance{}, relays: map[string]*Relay{}, cuts: map[string]chan Cut{},
		locks: map[string]*sync.Mutex{}, idleFrom: map[string]time.Time{},
	}
	for _, a := range autos {
		j.replicas[a.ReplicaID] = a
	}
	for n, id := range all {
		// The instance's home replica first, then the others.
		var targets []string
		health := map[string]string{}
		for k := range autos {
			a := autos[(n+k)%len(autos)]
			targets = append(targets, a.Addr())
			if rc.pg {
				health[a.Addr()] = a.ReadyURL()
			}
		}
		cuts := make(chan Cut, 8)
		r, err := NewBalancingRelay(targets, true, func(c Cut) {
			select {
			case cuts <- c:
			default:
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		if rc.pg {
			// The load balancer's health check: each replica's /readyz,
			// as docs/several-automators.md advises.
			r.CheckHealth(health, time.Second)
		}
		url, env := "http://"+r.Addr(), map[string]string(nil)
		if id == connectRestartTarget {
			// Only the CONNECT proxy knows this name: the instance reaches
			// the automator through it or not at all. Over TLS, ended in
			// front of the relay: a proxy refuses http:// to a host that
			// is not loopback.
			const name = "automator.chaos.test"
			host := fmt.Sprintf("%s:%d", name, auto.Port)
			connect.Route(host, NewTLSFront(t, auto.DataDir, name, r.Addr()).Addr())
			url, env = "https://"+host, map[string]string{"HTTPS_PROXY": "http://" + connect.Addr()}
		}
		j.instances[id], j.relays[id], j.cuts[id] = newInstance(t, dir, id, profile, url, scripts, 6, env), r, cuts
	}
	var wg sync.WaitGroup
	for _, id := range all {
		if id == top.pair[1] {
			continue // the warm standby: installed, configured, stopped
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := j.instances[id].StartPolling(30 * time.Second); err != nil {
				t.Errorf("starting %s: %v", id, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	cs := &callers{account: "acme", execLog: execLog, seed: rc.seed, minTimeout: rc.minTimeout, maxTimeout: rc.maxTimeout}
	if rc.pg {
		var conns []*grpc.ClientConn
		for _, a := range autos {
			conn := a.Dial()
			conns = append(conns, conn)
			cs.replicas = append(cs.replicas, automatorv1.NewAutomatorServiceClient(conn))
		}
		// Each caller has a Go client of its own given every replica's
		// address (through the callers' relays), its own replica first.
		key, err := os.ReadFile(filepath.Join(auto.DataDir, config.FileAPIKey))
		if err != nil {
			t.Fatal(err)
		}
		for i := range rc.callers {
			var addrs []string
			for k := range autos {
				addrs = append(addrs, "http://"+callerRelays[autos[(i+k)%len(autos)].ReplicaID].Addr())
			}
			c, err := client.New(client.Config{Addresses: addrs, APIKey: strings.TrimSpace(string(key))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			cs.gos = append(cs.gos, c)
		}
		j.afterAutomatorRestart = func() {
			for _, c := range conns {
				c.ResetConnectBackoff()
			}
		}
	} else {
		conn := auto.Dial()
		j.afterAutomatorRestart = conn.ResetConnectBackoff
		cs.client = automatorv1.NewAutomatorServiceClient(conn)
	}
	schedule := plan(rc.seed, rc.duration, rc.plan, top)
	var lines []string
	for _, p := range schedule {
		lines = append(lines, p.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "schedule.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	stalls := watchStalls(t)
	j.start = time.Now()
	j.setIdle(top.pair[1], true, j.start)
	submitting, stopSubmitting := context.WithTimeout(context.Background(), rc.duration)
	defer stopSubmitting()
	hard, stopHard := context.WithTimeout(context.Background(), 2*rc.duration)
	defer stopHard()
	injected := make(chan struct{})
	go func() { j.Run(submitting, schedule); close(injected) }()
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-progress.C:
				fmt.Printf("chaos: %v: %d units acknowledged, %d ended\n", time.Since(j.start).Round(time.Second), cs.acked.Load(), cs.ended.Load())
			case <-done:
				return
			}
		}
	}()
	cs.run(submitting, hard, rc.callers, rc.atLeast)
	close(done)
	<-injected
	elapsed := time.Since(j.start)

	units := cs.Units()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cs.finalStates(ctx, units); err != nil {
		t.Error(err)
	}
	// Stop the instances the way a service stop does, so every script
	// they started has logged its start.
	for _, in := range j.instances {
		if in.Running() {
			_ = in.Signal(syscall.SIGTERM)
		}
	}
	for _, in := range j.instances {
		if p := in.Proc(); p != nil {
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s of SIGTERM", in.ID)
			}
		}
	}

	faults, idle := j.Result()
	h := History{Units: units, Execs: readExecs(t, execLog), Faults: faults, Idle: idle, Instances: all, Replicas: replicaIDs, Stalls: stalls()}
	rep := Check(h, Options{})
	var noticed time.Duration
	for _, d := range j.noticed {
		noticed = max(noticed, d)
	}
	fmt.Printf("\nchaos: seed %d, faults for %v, run %v (submitting until %d units), %d callers, %d instances (one through a CONNECT proxy, one a warm standby), %s\n\n%s",
		rc.seed, rc.duration, elapsed.Round(time.Second), rc.atLeast, rc.callers, len(all), store, rep.Table())
	fmt.Printf("| dead connection noticed and dialled again (net-idle-cut), slowest | %s |\n", ms(noticed))
	fmt.Printf("\nchaos: replay with: %s\n", rc.replay())
	if len(j.skipped) > 0 {
		t.Logf("%d planned faults were not injected:\n%s", len(j.skipped), strings.Join(j.skipped, "\n"))
	}
	if err := rep.Err(); err != nil {
		t.Errorf("seed %d: %v\nreplay with: %s", rc.seed, err, rc.replay())
	}
	for _, k := range top.kinds() {
		if rep.FaultsByKind[k] == 0 {
			t.Errorf("no %s fault was injected; every kind must be", k)
		}
	}
	if rc.long && rep.Units < rc.atLeast {
		t.Errorf("%d units, want at least %d", rep.Units, rc.atLeast)
	}
	if t.Failed() {
		fmt.Printf("chaos: logs in %s (pass -chaos.dir to keep them)\n", dir)
		for _, id := range all {
			if p := j.instances[id].Proc(); p != nil {
				t.Logf("---- tail of %s ----\n%s", id, p.Tail(20))
			}
		}
		// The faults' times, to set the violations' times against.
		var fl strings.Builder
		for _, f := range faults {
			end := ""
			if !f.End.IsZero() {
				end = "–" + f.End.Format("15:04:05.000")
			}
			fmt.Fprintf(&fl, "%s%s %s %s\n", f.Start.Format("15:04:05.000"), end, f.Kind, strings.Join(f.Targets, ","))
		}
		t.Logf("---- faults injected ----\n%s", fl.String())
		for _, a := range autos {
			if p := a.Proc(); p != nil {
				name := a.ReplicaID
				if name == "" {
					name = "(SQLite)"
				}
				// Its warnings and errors: its INFO lines are mostly units
				// timed out, which the violations name already.
				var warn []string
				for _, l := range strings.Split(p.Log(), "\n") {
					if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
						warn = append(warn, l)
					}
				}
				t.Logf("---- the last warnings and errors of automator %s (its current process) ----\n%s\n---- its tail ----\n%s", name, strings.Join(warn[max(0, len(warn)-20):], "\n"), p.Tail(10))
			}
		}
	}
}

// watchStalls notices when the test machine stands still, every process
// frozen at once: a ticker of the harness fires far later than it should
// (a loaded machine), or the wall clock runs ahead of the monotonic one
// between two ticks (a paused virtual machine: its monotonic clock stops
// while it is paused, and its wall clock is set forward on resume; the
// automator's deadlines are on the wall clock). It returns the stalls seen
// so far, on the wall clock; it stops when the test ends.
func watchStalls(t *testing.T) func() []Interval {
	const every = 50 * time.Millisecond
	var mu sync.Mutex
	var out []Interval
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				now := time.Now()
				if stalled(now.Sub(last), now.Round(0).Sub(last.Round(0))) {
					mu.Lock()
					out = append(out, Interval{Who: Machine, Start: last.Round(0), End: now.Round(0)})
					mu.Unlock()
				}
				last = now
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return func() []Interval {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(out)
	}
}

// stalled says whether the machine stood still between two ticks of
// watchStalls that its monotonic clock read mono apart and its wall clock
// wall apart: mono far past the ticker's period, or wall far ahead of
// mono. A wall clock stepped back is no stall.
func stalled(mono, wall time.Duration) bool {
	const still = 750 * time.Millisecond
	return mono > still || wall-mono > still
}

// A stall is a tick of watchStalls far later than its period, or the wall
// clock far ahead of the monotonic one: a paused virtual machine (one of
// these machines froze 5.3 s in a soak, its monotonic clock stopped, and
// its wall clock set forward on resume). A wall clock stepped back is
// none, nor is an ordinary tick.
func TestAStallIsATickerLateOrTheWallClockAheadOfTheMonotonic(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, c := range []struct {
		name       string
		mono, wall time.Duration
		want       bool
	}{
		{"on time", ms(50), ms(50), false},
		{"a little late", ms(400), ms(400), false},
		{"the ticker late (a loaded machine)", ms(1200), ms(1200), true},
		{"the wall clock ahead (a paused virtual machine)", ms(50), ms(5350), true},
		{"the wall clock stepped back", ms(50), -time.Hour, false},
	} {
		if got := stalled(c.mono, c.wall); got != c.want {
			t.Errorf("%s (monotonic %v, wall %v): stalled %v, want %v", c.name, c.mono, c.wall, got, c.want)
		}
	}
}
