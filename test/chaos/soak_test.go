//go:build linux

package chaos

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// Flags of the soak (`make soak`). Without -soak.duration TestSoak is
// skipped, so `make test` never runs it.
var (
	flagSoakDuration = flag.Duration("soak.duration", 0, "run the soak (TestSoak) for this long under load; without it TestSoak is skipped (make soak)")
	flagSoakDir      = flag.String("soak.dir", "", "keep the soak's samples, report, profiles, logs and data directory here (default: a temporary directory, removed)")
	flagSoakRate     = flag.Float64("soak.rate", 40, "units the soak's callers start per second")
	flagSoakCallers  = flag.Int("soak.callers", 32, "the soak's concurrent callers")
	flagSoakEvery    = flag.Duration("soak.every", 5*time.Second, "how often the soak samples the processes")
	flagSoakSeed     = flag.Uint64("soak.seed", 0, "seed of the soak's units and disturbances (0: random)")
)

// soakUnitTimeout is the timeout of the soak's ordinary units: short, so
// that a unit whose claimer was killed times out within seconds and the
// load stays steady.
const soakUnitTimeout = 10 * time.Second

// TestSoak is the leak check: a real automator on durable SQLite and four
// real proxy instances of one account (p2 and p3 behind fault-injecting
// relays), concurrent executeOnProxy callers at a steady rate with a mix of
// units (`@ping`, a small script with stdin, failing scripts, scripts not
// deployed, units that time out and units cancelled while they run,
// callers that give up, idempotent repeats), and mild disturbances every
// 8–16 s: connection resets and short black holes through the relays,
// resets of the callers' connections, a graceful restart or a crash of p3
// or p4. The automator is never killed: it is the process under watch,
// with p1 and p2 (never restarted) and their reapers. Every few seconds
// the sampler reads their memory, open files and threads from /proc, the
// automator's goroutines and heap from its /metrics, and the database's
// size; at the end SoakVerdict compares the last quarter of the run with
// the second, and the run fails on any growth past its allowance, any
// broken guarantee and any caller error that was not a retryable outage.
//
// It runs only with -soak.duration (make soak, 20 minutes by default).
func TestSoak(t *testing.T) {
	if *flagSoakDuration <= 0 {
		t.Skip("the soak runs only when given -soak.duration: make soak (SOAK_DURATION=20m by default)")
	}
	duration, every := *flagSoakDuration, *flagSoakEvery
	seed := *flagSoakSeed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) % 1e9
	}
	binaries(t)
	dir := *flagSoakDir
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("soak: %v, %.0f units/s from %d callers, sampled every %v, seed %d\n", duration, *flagSoakRate, *flagSoakCallers, every, seed)
	replay := fmt.Sprintf("make soak SOAK_DURATION=%v SOAK_FLAGS='-soak.seed=%d -soak.rate=%g -soak.callers=%d -soak.every=%v'", duration, seed, *flagSoakRate, *flagSoakCallers, every)
	fmt.Printf("soak: replay its units and disturbances with: %s\n", replay)

	// The automator, over TLS as in production; pprof beside it, for the
	// goroutine and heap profiles kept with the samples.
	auto := newAutomator(t, dir, "127.0.0.1", false)
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	auto.Env = map[string]string{"AUTOMATOR_PPROF_ADDR": pprofAddr}
	if err := auto.Serve(); err != nil {
		t.Fatal(err)
	}
	serving, ok, err := config.ReadServing(auto.DataDir)
	if err != nil || !ok {
		t.Fatalf("serving.yaml: %v", err)
	}
	profile := auto.CreateAccount("acme")
	scripts := writeScripts(t, dir)
	execLog := filepath.Join(dir, "exec.log")

	// p1 and p4 reach the automator directly, p2 and p3 through relays.
	// p1 and p2 are sampled and never restarted; p3 and p4 are restarted.
	relays := map[string]*Relay{}
	instances := map[string]*instance{}
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		url := "https://" + auto.Addr()
		if id == "p2" || id == "p3" {
			r, err := NewRelay(auto.Addr(), false, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			relays[id], url = r, "https://"+r.Addr()
		}
		instances[id] = newInstance(t, dir, id, profile, url, scripts, 4, nil)
		if err := instances[id].StartPolling(30 * time.Second); err != nil {
			t.Fatalf("starting %s: %v", id, err)
		}
	}
	// The callers share one connection, through a relay that resets it.
	callerRelay, err := NewRelay(auto.Addr(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(callerRelay.Close)
	load := &soakLoad{
		client:  automatorv1.NewAutomatorServiceClient(auto.DialAt(callerRelay.Addr())),
		account: "acme", execLog: execLog, seed: seed, timeout: soakUnitTimeout,
	}

	csvf, err := os.Create(filepath.Join(dir, "samples.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer csvf.Close()
	running := func(p *proc) int {
		if p == nil || p.Exited() {
			return 0
		}
		return p.PID()
	}
	targets := []SoakTarget{{Name: "automator", Role: RoleAutomator, PID: func() int { return running(auto.Proc()) },
		MetricsURL: "http://" + serving.HTTP + "/metrics"}}
	for _, id := range []string{"p1", "p2"} {
		in := instances[id]
		targets = append(targets, SoakTarget{Name: id, Role: RoleProxy, PID: func() int { return running(in.Proc()) }})
		targets = append(targets, SoakTarget{Name: id + " reaper", Role: RoleReaper, PID: reaperOf(func() int { return running(in.Proc()) }), Later: true})
	}
	db := filepath.Join(auto.DataDir, config.FileDB)
	sampler := NewSoakSampler(targets, []SoakFile{
		{Name: "database", Role: RoleDatabase, Resource: ResDBBytes, Path: db},
		{Name: "database", Role: RoleDatabase, Resource: ResWALBytes, Path: db + "-wal"},
	}, csvf)

	d := &disturber{
		rng:    mrand.New(mrand.NewPCG(seed, 0xd15)),
		relays: relays, callerRelay: callerRelay,
		restartable: map[string]*instance{"p3": instances["p3"], "p4": instances["p4"]},
	}

	start := time.Now()
	stalls := watchStalls(t)
	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	var bg sync.WaitGroup
	bg.Go(func() { sampler.Run(ctx, every) })
	bg.Go(func() { d.run(ctx) })
	bg.Go(func() {
		// The automator's profiles when the part the verdict compares
		// begins, and at the end.
		at := time.NewTimer(duration / 4)
		defer at.Stop()
		select {
		case <-at.C:
			saveProfiles(t, pprofAddr, dir, "early")
		case <-ctx.Done():
		}
	})
	bg.Go(func() {
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				fmt.Printf("soak: %v: %d units ended, %s\n", time.Since(start).Round(time.Second), load.ended.Load(), latest(sampler.Series()))
			}
		}
	})
	load.run(ctx, *flagSoakRate, *flagSoakCallers)
	bg.Wait()
	elapsed := time.Since(start)
	saveProfiles(t, pprofAddr, dir, "late")

	// Stop the proxies as a service stop does, so that every script they
	// started has logged its start.
	for _, in := range instances {
		if in.Running() {
			_ = in.Signal(syscall.SIGTERM)
		}
	}
	for id, in := range instances {
		if p := in.Proc(); p != nil {
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s of SIGTERM", id)
			}
		}
	}

	units := load.Units()
	events := d.Events()
	for _, s := range stalls() {
		events = append(events, soakEvent{Kind: evMachineStall, Target: Machine, Start: s.Start, End: s.End})
	}
	sort.Slice(events, func(i, j int) bool { return events[i].Start.Before(events[j].Start) })
	check := checkSoak(units, readExecs(t, execLog), events, time.Now())
	// The units ended are the load's progress, given to the verdict for
	// the database's growth per unit, and not a resource of their own.
	var series []SoakSeries
	for _, s := range sampler.Series() {
		if s.Resource != ResUnitsEnded {
			series = append(series, s)
		}
	}
	rep := SoakVerdict(series, SoakOptions{Allow: DefaultSoakAllowances(), Span: duration, Units: sampler.Units()})

	var out strings.Builder
	fmt.Fprintf(&out, "\nsoak: seed %d, load for %v (run %v), %.0f units/s asked from %d callers, %d samples every %v\n\n",
		seed, duration, elapsed.Round(time.Second), *flagSoakRate, *flagSoakCallers, sampler.Samples(), every)
	out.WriteString(check.Table())
	fmt.Fprintf(&out, "\n| disturbance | times |\n|---|---:|\n")
	byKind := map[string]int{}
	for _, e := range events {
		byKind[e.Kind]++
	}
	var kinds []string
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&out, "| %s | %d |\n", k, byKind[k])
	}
	ended := 0.0
	if us := sampler.Units(); len(us) > 0 {
		ended = us[len(us)-1].Value - us[0].Value
	}
	fmt.Fprintf(&out, "\nunits ended by the automator while sampled: %.0f, %.1f units/s; callers saw %d units end, made %d calls again after a reset, and skipped %d starts for want of a free caller\n\n",
		ended, ended/duration.Seconds(), load.ended.Load(), load.retried.Load(), load.skipped.Load())
	out.WriteString(rep.Table())
	result := "PASS"
	var failures []string
	if err := rep.Err(); err != nil {
		failures = append(failures, err.Error())
	}
	if err := check.Err(); err != nil {
		failures = append(failures, err.Error())
	}
	for _, id := range []string{"automator", "p1", "p2"} {
		for _, s := range series {
			if s.Process == id && len(s.PIDs) > 1 {
				failures = append(failures, fmt.Sprintf("%s was replaced during the run (pids %v): the soak watches one process", id, s.PIDs))
				break
			}
		}
	}
	if errs := sampler.Errors(); len(errs) > 0 {
		failures = append(failures, "readings failed:\n  "+strings.Join(errs, "\n  "))
	}
	if d.Err() != nil {
		failures = append(failures, d.Err().Error())
	}
	if len(failures) > 0 {
		result = "FAIL"
	}
	fmt.Fprintf(&out, "\nsoak: replay its units and disturbances with: %s\nsoak: %s\n", replay, result)
	fmt.Print(out.String())
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(out.String()), 0o644); err != nil {
		t.Error(err)
	}
	writeEvents(t, filepath.Join(dir, "disturbances.txt"), start.Round(0), events)
	for _, f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		fmt.Printf("soak: samples, report, profiles and logs in %s (pass -soak.dir to keep them)\n", dir)
		if p := auto.Proc(); p != nil {
			t.Logf("---- tail of the automator ----\n%s", p.Tail(20))
		}
	}
}

// reaperOf finds the reaper of the proxy pid returns: its child whose
// environment holds PROXY_REAPER=1 (started with the proxy's first script,
// and again if it dies). It remembers the last one found while that one is
// still the proxy's child.
func reaperOf(pid func() int) func() int {
	var mu sync.Mutex
	last := 0
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		parent := pid()
		if parent == 0 {
			return 0
		}
		if last != 0 && ppid(last) == parent {
			return last
		}
		last = ChildWithEnv(parent, "PROXY_REAPER=1")
		return last
	}
}

// latest sums up the last readings of the automator, for the progress
// lines.
func latest(series []SoakSeries) string {
	var parts []string
	for _, s := range series {
		if s.Process != "automator" || len(s.Points) == 0 || s.Resource == ResUnitsEnded {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", s.Resource, FormatSoakValue(s.Resource, s.Points[len(s.Points)-1].Value, false)))
	}
	return "automator: " + strings.Join(parts, ", ")
}

// saveProfiles keeps the automator's goroutines (debug=1: counted by
// stack) and heap profile in dir, named by when.
func saveProfiles(t *testing.T, pprofAddr, dir, when string) {
	client := &http.Client{Timeout: 30 * time.Second}
	for name, path := range map[string]string{"goroutines": "/debug/pprof/goroutine?debug=1", "heap": "/debug/pprof/heap"} {
		resp, err := client.Get("http://" + pprofAddr + path)
		if err != nil {
			t.Logf("profile %s (%s): %v", name, when, err)
			continue
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Logf("profile %s (%s): %v", name, when, err)
			continue
		}
		ext := ".txt"
		if name == "heap" {
			ext = ".pb.gz"
		}
		if err := os.WriteFile(filepath.Join(dir, "automator-"+name+"-"+when+ext), data, 0o644); err != nil {
			t.Log(err)
		}
	}
	client.CloseIdleConnections()
}

// ---- the load ----

// soakKind is a kind of unit the soak's callers run.
type soakKind int

const (
	soakPing    soakKind = iota // @ping through ExecuteOnProxy: succeeds
	soakEcho                    // echo.sh with stdin, Submit then Wait: succeeds with its output
	soakExit                    // echo.sh exiting 1–3 (a failing script): succeeds with that exit code
	soakMissing                 // a script not deployed: fails, nothing runs
	soakTimeout                 // echo.sh sleeping 30 s with a 1.5 s timeout: timed out, killed by its proxy
	soakCancel                  // echo.sh sleeping 30 s, cancelled 0–500 ms after its submit: cancelled, killed if running
	soakGiveUp                  // ExecuteOnProxy of echo.sh sleeping 0.5 s, the caller gone after 100 ms; waited for again by key: succeeds
	soakRepeat                  // @ping twice with one idempotency key: one unit
	soakKinds
)

var soakKindNames = [soakKinds]string{"@ping", "script with stdin", "failing script", "script not deployed", "timed out running", "cancelled", "caller gave up", "idempotent repeat"}

func (k soakKind) String() string { return soakKindNames[k] }

// soakWeights are the kinds' shares of the load, in percent.
var soakWeights = [soakKinds]int{35, 25, 10, 5, 7, 8, 5, 5}

func pickKind(rng *mrand.Rand) soakKind {
	r := rng.IntN(100)
	for k, w := range soakWeights {
		if r < w {
			return soakKind(k)
		}
		r -= w
	}
	return soakPing
}

// soakUnit is what a caller asked and saw of one unit.
type soakUnit struct {
	Unit
	Kind soakKind
	// Err is a caller error that is not an outage to retry: a broken
	// promise of the API, or of the harness.
	Err string
}

// soakLoad drives the callers. Every unit has an idempotency key, so a call
// cut by a reset of the callers' connection is made again with it and gets
// the same unit.
type soakLoad struct {
	client  automatorv1.AutomatorServiceClient
	account string
	execLog string
	seed    uint64
	timeout time.Duration

	mu      sync.Mutex
	units   []soakUnit
	ended   atomic.Int64
	skipped atomic.Int64
	retried atomic.Int64
}

// run starts a unit rate times a second, each on a free caller of n (a
// start that finds none is skipped and counted), until ctx is done, and
// returns once every caller has seen its last unit end.
func (l *soakLoad) run(ctx context.Context, rate float64, n int) {
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(l.seed, uint64(i)+1))
			seq := 0
			for range jobs {
				u := l.one(i, seq, rng)
				seq++
				l.mu.Lock()
				l.units = append(l.units, u)
				l.mu.Unlock()
			}
		})
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			select {
			case jobs <- struct{}{}:
			default:
				l.skipped.Add(1)
			}
		}
	}
	close(jobs)
	wg.Wait()
}

// Units returns what the callers saw.
func (l *soakLoad) Units() []soakUnit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]soakUnit(nil), l.units...)
}

// retry makes call again while it fails with UNAVAILABLE (the callers'
// connection was reset), for up to a minute.
func (l *soakLoad) retry(call func() error) error {
	giveUp := time.Now().Add(time.Minute)
	for {
		err := call()
		if status.Code(err) != codes.Unavailable || time.Now().After(giveUp) {
			return err
		}
		l.retried.Add(1)
		pause(context.Background(), 50*time.Millisecond)
	}
}

// one runs a unit of a kind drawn from rng.
func (l *soakLoad) one(caller, seq int, rng *mrand.Rand) soakUnit {
	u := soakUnit{Kind: pickKind(rng)}
	u.Caller, u.Key, u.Timeout = caller, fmt.Sprintf("soak-%d-%d-%d", l.seed, caller, seq), l.timeout
	tok := fmt.Sprintf("s%d.%d", caller, seq)
	stdin := randText(rng, 4+rng.IntN(40))
	echo := func(sleep string, exit int) *automatorv1.Command {
		return &automatorv1.Command{Script: "echo.sh", Args: []string{tok, sleep, strconv.Itoa(exit)},
			Stdin: []byte(stdin), Env: map[string]string{"CHAOS_LOG": l.execLog}}
	}
	var cmd *automatorv1.Command
	switch u.Kind {
	case soakPing, soakRepeat:
		cmd = &automatorv1.Command{Script: "@ping"}
	case soakEcho:
		cmd = echo("0", 0)
		u.WantStdout = tok + ":" + stdin + "\n"
	case soakExit:
		u.WantExit = 1 + rng.IntN(3)
		cmd = echo("0", u.WantExit)
		u.WantStdout = tok + ":" + stdin + "\n"
	case soakMissing:
		cmd = &automatorv1.Command{Script: "missing.sh", Args: []string{tok}}
	case soakTimeout:
		u.Timeout = 1500 * time.Millisecond
		cmd = echo("30", 0)
	case soakCancel:
		cmd = echo("30", 0)
	case soakGiveUp:
		cmd = echo("0.5", 0)
		u.WantStdout = tok + ":" + stdin + "\n"
	}
	req := &automatorv1.ExecuteRequest{Account: l.account, Command: cmd, Timeout: durationpb.New(u.Timeout), IdempotencyKey: u.Key}
	u.SubmittedAt = time.Now()
	var st *automatorv1.WorkStatus
	var err error
	switch u.Kind {
	case soakEcho, soakCancel:
		st, err = l.submit(&u, req)
		if err != nil {
			break
		}
		if u.Kind == soakCancel {
			pause(context.Background(), time.Duration(rng.IntN(500))*time.Millisecond)
			err = l.retry(func() error {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := l.client.Cancel(cctx, &automatorv1.CancelRequest{WorkId: u.WorkID}, grpc.WaitForReady(true))
				return err
			})
			if err != nil {
				err = fmt.Errorf("Cancel: %w", err)
				break
			}
		}
		st, err = l.wait(&u)
	case soakGiveUp:
		// The caller's context ends while the script sleeps: the unit runs
		// on without it. A reset may cut the call first; either way the
		// caller comes back for it with its key.
		// Or the unit ends at once without running: its claim lost with
		// its claimer's reset connection fails it, which the check then
		// holds against the disturbances.
		gctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		gst, gerr := l.client.ExecuteOnProxy(gctx, req, grpc.WaitForReady(true))
		cancel()
		c := status.Code(gerr)
		switch {
		case gerr == nil && terminal(stateName(gst.GetState())) && gst.GetState() != automatorv1.State_STATE_SUCCEEDED:
			u.WorkID, u.AckedAt = gst.GetWorkId(), time.Now()
			st = gst
		case c != codes.DeadlineExceeded && c != codes.Unavailable:
			err = fmt.Errorf("ExecuteOnProxy given 100ms for a script sleeping 0.5s: %v (state %s), want the caller's deadline exceeded, or an end without running", gerr, stateName(gst.GetState()))
		default:
			if _, err = l.submit(&u, req); err == nil {
				st, err = l.wait(&u)
			}
		}
	default:
		st, err = l.execute(&u, req)
		if err == nil && u.Kind == soakRepeat {
			first := st.GetWorkId()
			st, err = l.execute(&u, req)
			if err == nil && st.GetWorkId() != first {
				err = fmt.Errorf("the same idempotency key gave %s, then %s", first, st.GetWorkId())
			}
		}
	}
	if err != nil {
		u.Err = err.Error()
		return u
	}
	l.ended.Add(1)
	u.Seen, u.SeenAt = true, time.Now()
	record(&u.Unit, st)
	return u
}

// execute calls ExecuteOnProxy, again with the same key when the callers'
// connection was reset.
func (l *soakLoad) execute(u *soakUnit, req *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	var st *automatorv1.WorkStatus
	err := l.retry(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), u.Timeout+20*time.Second)
		defer cancel()
		var err error
		st, err = l.client.ExecuteOnProxy(ctx, req, grpc.WaitForReady(true))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ExecuteOnProxy: %w", err)
	}
	u.WorkID, u.AckedAt = st.GetWorkId(), time.Now()
	return st, nil
}

// submit calls Submit, again with the same key when the callers'
// connection was reset.
func (l *soakLoad) submit(u *soakUnit, req *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	var st *automatorv1.WorkStatus
	err := l.retry(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		st, err = l.client.Submit(ctx, req, grpc.WaitForReady(true))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("Submit: %w", err)
	}
	u.WorkID, u.AckedAt = st.GetWorkId(), time.Now()
	return st, nil
}

// wait waits by id until the unit ends, again when the callers' connection
// was reset or a wait returned before the end.
func (l *soakLoad) wait(u *soakUnit) (*automatorv1.WorkStatus, error) {
	giveUp := time.Now().Add(u.Timeout + time.Minute)
	for {
		var st *automatorv1.WorkStatus
		err := l.retry(func() error {
			ctx, cancel := context.WithDeadline(context.Background(), giveUp)
			defer cancel()
			var err error
			st, err = l.client.Wait(ctx, &automatorv1.WaitRequest{WorkId: u.WorkID}, grpc.WaitForReady(true))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("Wait %s: %w", u.WorkID, err)
		}
		if terminal(stateName(st.GetState())) {
			return st, nil
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("Wait %s: still %s a minute past its timeout", u.WorkID, stateName(st.GetState()))
		}
	}
}

// ---- the disturbances ----

// soakEvent is one disturbance: its kind, target and when (on the wall
// clock).
type soakEvent struct {
	Kind, Target string
	Start, End   time.Time
}

// The soak's disturbances, each with its weight.
const (
	evRelayReset     = "relay-reset"     // reset every connection through p2's or p3's relay
	evRelayBlackhole = "relay-blackhole" // drop everything through it for 1–4 s, then reset what stalled
	evCallerReset    = "caller-reset"    // reset the callers' connection
	evProxyRestart   = "proxy-restart"   // SIGTERM p3 or p4, start it again once it has stopped
	evProxyCrash     = "proxy-crash"     // SIGKILL p3 or p4, start it again 0.5–2 s later
	// Not injected: the machine stood still (watchStalls), every process
	// frozen; it excuses what a disturbance of every proxy would.
	evMachineStall = "machine-stall"
)

var soakDisturbances = []struct {
	kind   string
	weight int
}{{evRelayReset, 30}, {evRelayBlackhole, 15}, {evCallerReset, 20}, {evProxyRestart, 20}, {evProxyCrash, 15}}

// disturber injects a disturbance every 8–16 s, drawn from rng.
type disturber struct {
	rng         *mrand.Rand
	relays      map[string]*Relay // p2, p3
	callerRelay *Relay
	restartable map[string]*instance // p3, p4

	mu     sync.Mutex
	events []soakEvent
	errs   []string
}

func (d *disturber) run(ctx context.Context) {
	for {
		gap := 8*time.Second + time.Duration(d.rng.Int64N(int64(8*time.Second)))
		t := time.NewTimer(gap)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		d.inject(ctx)
	}
}

func (d *disturber) inject(ctx context.Context) {
	total := 0
	for _, k := range soakDisturbances {
		total += k.weight
	}
	r, kind := d.rng.IntN(total), ""
	for _, k := range soakDisturbances {
		if r < k.weight {
			kind = k.kind
			break
		}
		r -= k.weight
	}
	pick := func(a, b string) string {
		if d.rng.IntN(2) == 0 {
			return a
		}
		return b
	}
	// On the wall clock, as the automator's times are: a pause of the
	// virtual machine stops the monotonic clock, not the wall clock.
	e := soakEvent{Kind: kind, Start: time.Now().Round(0)}
	switch kind {
	case evRelayReset:
		e.Target = pick("p2", "p3")
		d.relays[e.Target].DropAll()
	case evRelayBlackhole:
		e.Target = pick("p2", "p3")
		r := d.relays[e.Target]
		r.Partition(true)
		pause(ctx, time.Second+time.Duration(d.rng.Int64N(int64(3*time.Second))))
		r.Partition(false)
	case evCallerReset:
		e.Target = Callers
		d.callerRelay.DropAll()
	case evProxyRestart, evProxyCrash:
		e.Target = pick("p3", "p4")
		in := d.restartable[e.Target]
		p := in.Proc()
		if kind == evProxyCrash {
			in.Kill()
			pause(ctx, 500*time.Millisecond+time.Duration(d.rng.Int64N(int64(1500*time.Millisecond))))
		} else {
			_ = in.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				d.fail("%s did not stop within 30s of SIGTERM", e.Target)
				in.Kill()
			}
		}
		if err := in.StartPolling(30 * time.Second); err != nil {
			d.fail("starting %s again after %s: %v", e.Target, kind, err)
		}
	}
	e.End = time.Now().Round(0)
	d.mu.Lock()
	d.events = append(d.events, e)
	d.mu.Unlock()
}

func (d *disturber) fail(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, fmt.Sprintf(format, args...))
}

// Events returns the disturbances injected.
func (d *disturber) Events() []soakEvent {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]soakEvent(nil), d.events...)
}

// Err says what went wrong injecting them (a proxy that did not come back).
func (d *disturber) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) == 0 {
		return nil
	}
	return fmt.Errorf("disturbances: %s", strings.Join(d.errs, "; "))
}

func writeEvents(t *testing.T, path string, start time.Time, events []soakEvent) {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%9.3f %9.3f %s %s\n", e.Start.Sub(start).Seconds(), e.End.Sub(start).Seconds(), e.Kind, e.Target)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}
