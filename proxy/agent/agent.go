// Package agent is the proxy's poll loop: it long-polls the automator for
// units of its account, asking only for as many as it has free slots, runs
// each with the runner and posts the sealed result back, retrying until the
// unit's deadline.
//
// How work arrives (Poll) is kept apart from how it is executed (execute),
// so a push transport can feed the same execution later.
package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/ctxtime"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/loglimit"
	"github.com/opsgate/opsgate/internal/scriptenv"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

// Client is the part of the automator's ProxyService the agent uses.
type Client interface {
	Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error)
	Complete(ctx context.Context, in *automatorv1.CompleteRequest, opts ...grpc.CallOption) (*automatorv1.CompleteResponse, error)
}

// Options configure an Agent.
type Options struct {
	Client Client
	// Conn, when set, is the connection Client's polls go on: when a poll
	// fails while it cannot be set up, the next is made as soon as it is
	// (backOff), not after all of the backoff.
	Conn Conn
	// Uploads, when set, carries the calls that post more than
	// postAlonePast bytes of results; Client carries the polls and the
	// rest. Given its own connection, a large result on a thin uplink is
	// not queued ahead of the poll connection's keepalive ping, which
	// would miss its answer and drop that connection, healthy, mid-upload.
	// Nil: Client carries them.
	Uploads Client
	// Automator names the automator Client reaches (its URL), in the log
	// lines that say it cannot be reached or refused this proxy.
	Automator string
	// Route, when set, says which way Client dials the automator (directly,
	// or through the web proxy HTTPS_PROXY names), in the line that says it
	// cannot be reached: a web proxy that is down or refuses the tunnel
	// fails the poll as the automator's own outage would.
	Route string
	// Resolve, when set, looks up the host name that dialling the
	// automator makes this machine resolve (the web proxy's, when Client
	// goes through one): nil when it resolves to an address, an error
	// naming the name otherwise. The line that says a poll failed without
	// a connection to the automator gives its error as the cause: gRPC
	// says "produced zero addresses" of a name that does not resolve, and
	// nothing at all of a web proxy's (the poll waits for a connection
	// until its bound).
	Resolve        func(context.Context) error
	Keys           crypto.KeyRing
	InstanceID     string
	Hostname       string
	Version        string
	ScriptsDir     string
	MaxConcurrency int
	MaxOutput      int
	// AllowedEnv is the only variables a command may set (the config's
	// allowed_env); empty, none.
	AllowedEnv scriptenv.Allowlist
	// PollWait is the wait the agent asks for; the automator clamps it (30s).
	PollWait time.Duration
	// GracePeriod: on stop, running scripts get this long to finish before
	// they are killed (0: none, they are killed at once; the proxy's
	// grace_period, 30s unless its config says otherwise, is passed here).
	GracePeriod time.Duration
	// Backoff bounds the delay between failed polls (100ms to 15s).
	BackoffMin, BackoffMax time.Duration
	Logger                 *slog.Logger
	// StateFile, when set, is where the agent records its State (when it
	// last polled successfully, whether it is stopping) for `proxy status`,
	// after a successful poll at most once every StateEvery (5s).
	StateFile  string
	StateEvery time.Duration
	// ConfigFile and ConfigSHA256, recorded in the state file, are the
	// config file the agent's settings were read from and the digest of
	// its bytes then (config.Digest).
	ConfigFile, ConfigSHA256 string
	// EndGrace, when it closes while the agent stops, ends the grace period
	// at once (the proxy was asked to stop a second time).
	EndGrace <-chan struct{}
	// SpoolDir, when set, is where finished units' results are kept (each
	// written and fsynced while it is first posted) until the automator
	// accepts or refuses them, so they survive a restart of the proxy.
	// Unset: results are held in memory only.
	SpoolDir string
	// Reaper, when set, kills the scripts' process trees if the proxy
	// process dies while they run (runner.NewReaper). Nil: they outlive it.
	Reaper *runner.Reaper

	// tune is set by this package's tests only (zero: the defaults).
	tune tuning
}

// tuning is the runner and the bounds an Agent uses: tests change them for
// their own Agent, not for the package, so that they can run in parallel.
// A zero field takes its default (withDefaults).
type tuning struct {
	runScript func(context.Context, runner.Spec) (runner.Result, error)
	// reportLostWithin, stopSaidWithin, stopHeardWithin and pollMargin:
	// as the constants of the same names; postAttempt and minPostRate:
	// post.go.
	reportLostWithin, stopSaidWithin, stopHeardWithin, pollMargin time.Duration
	postAttempt                                                   time.Duration
	minPostRate                                                   int
	// rereadFirst, rereadMax and rereadFor: as the constants of the
	// same names.
	rereadFirst, rereadMax, rereadFor time.Duration
	// startWaitFor: as the constant of the same name (shortage.go).
	startWaitFor time.Duration
	// reconnectedPollAfter: as the constant of the same name
	// (reconnect.go).
	reconnectedPollAfter time.Duration
}

func (t tuning) withDefaults() tuning {
	if t.runScript == nil {
		t.runScript = runner.Run
	}
	if t.reportLostWithin <= 0 {
		t.reportLostWithin = reportLostWithin
	}
	if t.stopSaidWithin <= 0 {
		t.stopSaidWithin = stopSaidWithin
	}
	if t.stopHeardWithin <= 0 {
		t.stopHeardWithin = stopHeardWithin
	}
	if t.pollMargin <= 0 {
		t.pollMargin = pollMargin
	}
	if t.postAttempt <= 0 {
		t.postAttempt = postAttempt
	}
	if t.minPostRate <= 0 {
		t.minPostRate = minPostRate
	}
	if t.rereadFirst <= 0 {
		t.rereadFirst = rereadFirst
	}
	if t.rereadMax <= 0 {
		t.rereadMax = rereadMax
	}
	if t.rereadFor <= 0 {
		t.rereadFor = rereadFor
	}
	if t.startWaitFor <= 0 {
		t.startWaitFor = startWaitFor
	}
	if t.reconnectedPollAfter <= 0 {
		t.reconnectedPollAfter = reconnectedPollAfter
	}
	return t
}

// Agent runs the poll loop of one instance.
type Agent struct {
	o       Options
	log     *slog.Logger
	started time.Time
	// run identifies this Agent's poll loop to the automator: a poll of
	// the same run supersedes one still waiting there (PollRequest.run_id).
	run string
	// failLog and killLog bound the lines of units that could not run,
	// and of scripts killed at their units' deadlines or ends (execute.go);
	// shortLog those that say scripts cannot start for want of resources,
	// and start again (shortage.go); leftLog those of scripts that exited
	// leaving processes the proxy could not kill.
	failLog, killLog, shortLog, leftLog *loglimit.Limiter
	// freeze tells when a claim read after this process was stopped
	// arrived (freeze.go): its deadline counts from then.
	freeze freezeWatch

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // work id → cancel of its run
	// scripts counts the units of running whose script runs now (the
	// others are starting, or posting their results): a stop's log says
	// which it waits for and which it kills.
	scripts atomic.Int64
	// told: running units the automator said ended, whose scripts are
	// being killed; polls no longer list them (runningIDs).
	told      map[string]struct{}
	slotFreed chan struct{} // capacity 1: a unit finished, or no unit waits to start any more
	// waitingStart counts the units waiting for the resources their
	// scripts' starts lacked; short: the last start lacked them (logged
	// once until a script starts again). Both under mu (shortage.go).
	waitingStart int
	short        bool
	wg           sync.WaitGroup

	lastPoll time.Time
	// stopping is set once the poll loop has ended (the proxy is
	// stopping): the polls of this run say so from then on
	// (PollRequest.stopping).
	stopping atomic.Bool
	// heard: the automator answered the poll loop's last poll (none has
	// failed since); set as the loop ends, read by the stop (hearEnds).
	heard bool
	state *stateFile // used by Run's goroutine only
	spool *spool     // nil without SpoolDir
	// earlier: the polls whose answers earlier runs of this instance never
	// read and could not report, kept in the spool (lostpolls.go); used by
	// Run's goroutine only.
	earlier []lostPolls
	// earlierUnread: the start could not read the spool's record of lost
	// polls (loadEarlier), left in place; saveEarlier keeps what it holds.
	earlierUnread bool
	// checks are the key checks every poll carries
	// (PollRequest.key_checks), one for each of keyIDs(o.Keys), so that
	// the automator refuses this proxy, before it claims anything, if a
	// key it holds is not the account's key of its id (another account's
	// key line, or a mistyped one). Set by New.
	checks [][]byte
	poster *poster // posts results, several per call under load
}

// errCancelledByAutomator: the automator said the unit ended (cancelled or
// timed out); nothing is reported for it.
var errCancelledByAutomator = errors.New("the automator ended this unit")

// errShutdown: the proxy is stopping and the grace period ran out.
var errShutdown = errors.New("the proxy stopped (grace period over)")

// errStoppedAgain: the proxy is stopping and was asked to stop again.
var errStoppedAgain = errors.New("the proxy stopped (asked to stop a second time, before the grace period was over)")

// New makes an Agent.
func New(o Options) *Agent {
	if o.MaxConcurrency <= 0 {
		o.MaxConcurrency = 4
	}
	if o.PollWait <= 0 {
		o.PollWait = 30 * time.Second
	}
	if o.GracePeriod < 0 {
		o.GracePeriod = 0
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.tune = o.tune.withDefaults()
	a := &Agent{
		o:         o,
		log:       o.Logger.With("instance_id", o.InstanceID),
		started:   time.Now(),
		run:       rand.Text(),
		running:   make(map[string]context.CancelCauseFunc),
		told:      make(map[string]struct{}),
		slotFreed: make(chan struct{}, 1),
	}
	// A unit that could not run (its script missing, the scripts
	// directory gone) is the caller's to see in its result: the log's
	// lines of them are bounded, so that callers queueing units while the
	// scripts directory is missing do not write a line each.
	a.failLog = &loglimit.Limiter{Logger: a.log, Level: slog.LevelWarn,
		Summary:      "commands that could not run, not logged one by one",
		SummaryAttrs: []any{"see", "each unit's result on the automator (automator work show ID) names its reason"}}
	// Scripts that hang (a dependency down) are killed at each unit's
	// deadline: bounded the same way.
	a.killLog = &loglimit.Limiter{Logger: a.log, Level: slog.LevelWarn,
		Summary:      "scripts killed at their units' deadlines or ends, not logged one by one",
		SummaryAttrs: []any{"see", "each unit's state on the automator (automator work list --state timed_out)"}}
	// A host short of processes or file descriptors may stay so, or
	// come and go as scripts end: bounded too.
	a.shortLog = &loglimit.Limiter{Logger: a.log, Level: slog.LevelWarn,
		Summary: "scripts that could not start for want of resources, and started again, not logged one by one"}
	// What a script left running is killed after it exits; a kill that
	// failed (the proxy out of file descriptors, a process turned
	// another user's) leaves it running, which its result cannot say.
	a.leftLog = &loglimit.Limiter{Logger: a.log, Level: slog.LevelWarn,
		Summary: "scripts that exited leaving processes the proxy could not kill, not logged one by one"}
	a.state = newStateFile(o, a.log)
	a.spool = newSpool(o.SpoolDir, a.log)
	a.poster = newPoster(o.Client, o.Uploads, o.tune)
	a.checks = keyChecks(o.Keys)
	return a
}

// Run polls until ctx is cancelled, then stops asking for work, lets
// running units finish within the grace period (killing them after it, or
// as soon as the automator says they ended), posts their results and
// returns.
func (a *Agent) Run(ctx context.Context) error {
	// Runs and result posts outlive ctx: they end on their own, or when the
	// grace period is over.
	workCtx, stopWork := context.WithCancelCause(context.Background())
	defer stopWork(errShutdown)
	// The last line of a run, after what the stop's report of lost polls
	// says (deferred below, so run before this).
	defer func() {
		a.state.stopped(time.Now())
		a.log.Info("stopped")
	}()

	// The threads scripts will need, made before they run: scripts that
	// reach a limit of processes then cost the proxy a start, not its life.
	runner.ReserveThreads()
	fctx, stopFreeze := context.WithCancel(context.Background())
	defer stopFreeze()
	go a.freeze.run(fctx)
	a.state.started(a.o, time.Now())
	a.resumeSpooled(ctx, workCtx)
	a.loadEarlier()
	seq, lostFrom := a.pollLoop(ctx, workCtx)
	a.stopping.Store(true)
	a.state.stopping(time.Now(), a.inFlight())

	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	// The running units are still this instance's to kill when they end
	// on the automator (cancelled): keep asking which did, for no units,
	// until they are over.
	listenCtx, stopListening := context.WithCancel(context.Background())
	listened := make(chan struct{})
	var reportErr error // why the stop's last report of lostFrom failed
	go func() { defer close(listened); seq, lostFrom, reportErr = a.hearEnds(listenCtx, seq, lostFrom) }()
	defer func() {
		stopListening()
		<-listened
		a.keepLost(seq, lostFrom, reportErr)
	}()
	if n := a.inFlight(); n > 0 {
		scripts := int(a.scripts.Load())
		a.log.Info("stopping: waiting for running units", "running", n, "scripts_running", scripts, "results_unposted", max(n-scripts, 0), "grace_period", a.o.GracePeriod)
	}
	kill := func(why error) {
		a.cancelAll(why)
		// With a spool, results not yet posted stay in it for the next
		// start; without one, they are posted until their deadlines,
		// unless the proxy was asked to stop again (they are lost, and
		// logged as such).
		if a.spool != nil || why == errStoppedAgain {
			stopWork(why)
		}
		stopListening() // every unit is being killed: none is left to hear of
		<-done
	}
	select {
	case <-done:
		stopListening()
	case <-time.After(a.o.GracePeriod):
		// Units whose script has ended are only posting their results:
		// nothing of theirs is killed, and the log says so.
		// With nothing in flight (a grace period of 0s, the proxy idle)
		// there is nothing to say.
		n, scripts := a.inFlight(), int(a.scripts.Load())
		switch {
		case scripts > 0:
			a.log.Warn("grace period over: killing running scripts", "scripts_running", scripts, "results_unposted", max(n-scripts, 0))
		case n > 0 && a.spool != nil:
			a.log.Warn("grace period over: no script is running, only results are still unposted; posting them ends here, and the next start posts them from the spool", "results_unposted", n)
		case n > 0:
			// Without a spool they would be lost: they are posted on,
			// until their deadlines, and the stop waits (a review: this
			// line said their posting ended, and the proxy ran on 47 s).
			a.log.Warn("grace period over: no script is running, only results are still unposted; without a state_dir to keep them, the stop waits while they are posted, until their units' deadlines at the latest (a stop asked again ends it, losing them)", "results_unposted", n)
		}
		kill(errShutdown)
	case <-a.o.EndGrace:
		a.log.Warn("asked to stop again: killing running units", "running", a.inFlight())
		kill(errStoppedAgain)
	}
	return nil
}

// pollLoop asks for as many units as there are free slots, until ctx is
// done. With every slot busy it still polls, for no units, so it hears at
// once when a running unit is cancelled; that poll is dropped as soon as a
// slot frees (dropping it is safe: a poll for no units claims nothing).
//
// It returns the number of its last poll and the first of those whose
// answers never came since the last answered one (0: none), for the polls
// that follow.
func (a *Agent) pollLoop(ctx, workCtx context.Context) (seq, lostFrom uint64) {
	st := connState{log: a.log, automator: a.o.Automator, route: a.o.Route, resolve: a.o.Resolve}
	// A poll cancelled by the stop leaves st as it was: up when the poll
	// before it was answered.
	defer func() { a.heard = st.up }()
	// A name that does not resolve is said at once: through a web proxy
	// whose name does not, the first poll fails only at its bound (41 s).
	st.checkName()
	bo := backoff{min: a.o.BackoffMin, max: a.o.BackoffMax}
	// The first poll, and the first after a failure, does not wait: it tells
	// at once (and logs once) whether the automator accepts this proxy.
	quick := true
	// seq numbers the polls; lostFrom is the first since the last answered
	// one that asked for units and got no answer (0: none), which every
	// poll reports until one is answered (PollRequest.lost_from).
	for ctx.Err() == nil {
		// An earlier run's lost polls are reported first, before any poll
		// of this run, which would make that run's poll look like a
		// second process polling as this instance.
		if len(a.earlier) > 0 {
			if err := a.reportEarlier(ctx); err != nil {
				if ctx.Err() != nil {
					return seq, lostFrom
				}
				st.failed(err)
				quick = true
				if !a.backOff(ctx, bo.next()) {
					return seq, lostFrom
				}
				continue
			}
		}
		select {
		case <-a.slotFreed: // counted below
		default:
		}
		n := a.o.MaxConcurrency - a.inFlight()
		if a.waitingForStarts() {
			// A unit waits for what its script's start lacked (file
			// descriptors, processes): one more would only wait too,
			// where another instance may run it now. The poll goes on
			// for no units, ended when no unit waits any more.
			n = 0
		}
		pctx, cancel := context.WithCancel(ctx)
		if n == 0 {
			go func() {
				select {
				case <-a.slotFreed:
					cancel()
				case <-pctx.Done():
				}
			}()
		}
		wait := a.o.PollWait
		if quick {
			wait = 0
		}
		seq++
		rctx, written := recordSent(pctx)
		sent := time.Now()
		resp, err := a.poll(rctx, n, wait, seq, lostFrom)
		arrived := a.freeze.arrived(sent)
		// A poll for no units that answered as it was dropped is still
		// read: its answer may say which running units were cancelled.
		dropped := err != nil && pctx.Err() != nil && ctx.Err() == nil && n == 0
		cancel()
		if ctx.Err() != nil && err != nil {
			// Stopped while the poll waited. One that asked for units
			// may have been handed some (stored as claimed by this
			// instance) in an answer that crossed the cancel and is
			// never read: the stop reports it (hearEnds), so they fail
			// now rather than time out. A poll for no units claims
			// nothing, nor does one that reached no automator.
			if n > 0 && lostFrom == 0 && mayHaveClaimed(err) {
				lostFrom = seq
			}
			return seq, lostFrom
		}
		// An answer that came as the proxy was asked to stop is still
		// read: its claims are this instance's, and no other runs them.
		// They run within the grace period; the loop ends after them.
		if dropped {
			continue
		}
		if err != nil {
			// Units the automator claimed for it, if any, never arrive.
			// A poll refused as unauthenticated claimed none: the
			// automator refuses its token before it claims, and fails
			// what it had handed it (a token withdrawn, its account
			// deleted, while it waited); nor did one refused for its
			// keys (mayHaveClaimed). Nor did one that reached no
			// automator (it down, its name not resolving): a stop
			// would wait to report it, and say it stopped without.
			if n > 0 && lostFrom == 0 && mayHaveClaimed(err) {
				lostFrom = seq
			}
			st.failed(err)
			quick = true
			if !a.backOff(ctx, bo.next()) {
				return
			}
			continue
		}
		lostFrom = 0 // the automator ended those units
		st.ok()
		bo.reset()
		quick = false
		now := time.Now()
		a.mu.Lock()
		a.lastPoll = now
		a.mu.Unlock()
		a.state.recordPoll(now)
		for _, id := range resp.GetCancelled() {
			a.ended(id)
		}
		from := claimedAt(written(sent), arrived, resp)
		claims := resp.GetClaims()
		if len(claims) > n {
			// Never more than asked; the excess is not run (it times out).
			a.log.Error("automator sent more claims than free slots", "asked", n, "got", len(claims))
			claims = claims[:n]
		}
		for _, c := range claims {
			if a.isRunning(c.GetWorkId()) {
				// A unit's script runs at most once here, whatever the
				// automator says (the same unit twice in an answer, or
				// again while it runs): a second run could do its work
				// twice, and its end would free the first one's slot.
				a.log.Error("automator sent a claim for a unit already running here: not run again", "work_id", c.GetWorkId())
				continue
			}
			a.start(workCtx, c, from)
		}
		if len(claims) > 0 {
			// Let the units just started run up to their first wait before
			// this goroutine encodes and sends the next poll: a result is
			// what someone waits for, the next poll is not.
			runtime.Gosched()
		}
	}
	return seq, lostFrom
}

// reportLostWithin bounds the polls a stopping agent makes to say that it
// stops and to report the polls whose answers it never read (lost_from),
// when nothing else polls: an unreachable automator, or a link busy with
// results, must not hold the stop up (the next start reports them,
// reportEarlier). An automator that answered the poll before the stop gets
// stopHeardWithin instead. Tests change it per Agent (tuning).
const reportLostWithin = 5 * time.Second

// stopSaidWithin bounds the one poll a stopping agent makes only to say
// that it stops (nothing running, no result left to post, no poll's
// answer lost), when the automator did not answer the poll before the
// stop (it was failing, or none was answered yet). Nothing else holds the
// stop up then, so the stop of a proxy whose automator is unreachable or
// silent (blackholed, hung) takes about this, where reportLostWithin would
// add 5 s to a stop that was instant before it said so. A second: the
// poll asks for no units and no wait, so a reachable automator answers it
// within a round trip and its write of the stop, and it leaves room for a
// connection set up again (TCP and TLS, two more round trips). Tests
// change it per Agent (tuning).
const stopSaidWithin = time.Second

// stopHeardWithin bounds the first poll of a stopping agent with nothing
// running whose automator answered the poll before the stop (the poll the
// stop cancelled, or the last one made): the automator is up, and the poll,
// which asks for no units and no wait, waits only for its write of the
// stop, which a busy disk or database can make take seconds. Cut short,
// the stop is not recorded, and the instance is listed as one that died,
// two poll windows later, rather than stopped. Ten seconds: the stop of a
// proxy with nothing running stays within what service managers give a
// stop (systemd 90 s, the proxy's own service a minute), also when the
// automator goes silent just as the proxy stops. Windows gives services 5
// to 20 s at system shutdown, depending on its version and settings: a
// stop it cuts short is listed as one that died, as before. Tests change
// it per Agent (tuning).
const stopHeardWithin = 10 * time.Second

// hearEnds polls for no units while the agent stops, until ctx is done,
// and kills the running units the automator says ended (cancelled, timed
// out): a stopping proxy claims nothing more, but a cancel of a unit it
// runs must still kill the script (a poll for no units claims nothing).
// Polls go on numbering from seq, reporting lostFrom until one is
// answered, and say that the proxy is stopping (PollRequest.stopping).
// Errors back off quietly: the stop is already logged.
//
// It first polls once at once, even with nothing running, however soon
// ctx ends, within reportLostWithin (within stopSaidWithin when nothing
// runs and nothing is lost: the poll only says the proxy stops; within
// stopHeardWithin when nothing runs and the automator answered the poll
// before the stop, for its first try): the automator shows the instance
// stopped from then on, rather than online until its last poll is two
// poll windows old. With lostFrom set (a poll that asked for units was
// stopped, or failed, before its answer was read), it polls until one is
// answered, within the same bound: the automator fails the units it had
// claimed for those polls at once, which otherwise stay claimed by this
// instance until their deadline. It returns the number of its last poll,
// lostFrom as it is after them (0: reported) and, when it is not 0, the
// error of the last poll that failed to report it (nil: none was tried to
// the end).
func (a *Agent) hearEnds(ctx context.Context, seq, lostFrom uint64) (uint64, uint64, error) {
	bo := backoff{min: a.o.BackoffMin, max: a.o.BackoffMax}
	var lastErr error
	within := a.o.tune.reportLostWithin
	if lostFrom == 0 && a.inFlight() == 0 {
		within = a.o.tune.stopSaidWithin
	}
	rctx, cancel := context.WithTimeout(context.Background(), within)
	// The first try's bound. After an answered poll the automator is up:
	// the try waits for its write of the stop. (With units running, the
	// polls that follow say it too.) A try that finds it unreachable is
	// not the case: tries after it keep within the bound above.
	first, cancelFirst := rctx, context.CancelFunc(func() {})
	if a.heard && a.inFlight() == 0 {
		first, cancelFirst = context.WithTimeout(context.Background(), max(within, a.o.tune.stopHeardWithin))
	}
	for try := 0; ; try++ {
		seq++
		pctx := rctx
		if try == 0 {
			pctx = first
		}
		resp, err := a.pollFor(pctx, 0, 0, seq, lostFrom)
		if err == nil {
			lostFrom, lastErr = 0, nil
			for _, id := range resp.GetCancelled() {
				a.ended(id)
			}
			break
		}
		if lostFrom == 0 {
			// Only the stop was to be said, and the automator's listings
			// tell it in two poll windows anyway: one try.
			break
		}
		lastErr = err
		// Tried again within the bound when the automator could not be
		// reached: a connection that dropped as the proxy stopped may
		// come back at once. Only an unreachable automator may answer
		// the next try; a refusal (the token revoked, say) would be
		// repeated.
		if status.Code(err) != codes.Unavailable || !a.backOff(rctx, bo.next()) {
			break
		}
	}
	cancelFirst()
	cancel()
	bo.reset()
	for ctx.Err() == nil {
		if len(a.runningIDs()) == 0 {
			// Nothing left to hear of (the units still counted are
			// being killed, or posting their results); ctx ends soon.
			<-ctx.Done()
			return seq, lostFrom, lastErr
		}
		seq++
		resp, err := a.poll(ctx, 0, a.o.PollWait, seq, lostFrom)
		if err != nil {
			if ctx.Err() == nil && lostFrom != 0 {
				lastErr = err
			}
			if !a.backOff(ctx, bo.next()) {
				return seq, lostFrom, lastErr
			}
			continue
		}
		lostFrom, lastErr = 0, nil
		bo.reset()
		for _, id := range resp.GetCancelled() {
			a.ended(id)
		}
	}
	return seq, lostFrom, lastErr
}

// poll is one poll of this run, within a poll's bounds (pollAsBounded).
func (a *Agent) poll(ctx context.Context, n int, wait time.Duration, seq, lostFrom uint64) (*automatorv1.PollResponse, error) {
	return a.pollAsBounded(ctx, a.run, n, wait, seq, lostFrom)
}

// pollAsBounded is one poll as the run named run (pollAs), within a
// poll's bounds.
func (a *Agent) pollAsBounded(ctx context.Context, run string, n int, wait time.Duration, seq, lostFrom uint64) (*automatorv1.PollResponse, error) {
	// The answer must begin within the wait plus a margin (the server
	// decides the wait and may add jitter); once it has begun (grpcwire.AnswerStarts)
	// it is given the time the largest answer takes at minPostRate. An
	// answer carrying large commands takes its time on a thin downlink:
	// 1 MiB, 35 s at 256 kbit/s. Cut off, its claims were lost, their
	// units failed without running.
	begin := a.o.PollWait + a.o.PollWait/5 + a.o.tune.pollMargin
	pctx, cancel := grpcwire.BeginWithin(ctx, begin, a.o.tune.answerWithin())
	defer cancel()
	resp, err := a.pollAs(pctx, run, n, wait, seq, lostFrom)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(pctx), grpcwire.ErrNoAnswer) {
		err = noAnswerError{within: begin, sent: !grpcwire.Unsent(pctx)}
	}
	if err != nil && grpcwire.Unsent(pctx) {
		err = unsentError{err}
	}
	return resp, err
}

// unsentError is the error of a poll that reached no automator
// (grpcwire.Unsent: no connection could be set up, or the name it dials
// resolved to nothing): it claimed nothing, so its answer is not lost.
type unsentError struct{ error }

func (e unsentError) Unwrap() error              { return e.error }
func (e unsentError) GRPCStatus() *status.Status { return status.Convert(e.error) }

// mayHaveClaimed reports whether a poll for units that failed with err
// may have had units claimed for it, in an answer never read: unless the
// automator refused its token (it refuses before it claims, and fails
// what it had handed the poll) or the keys it holds (FailedPrecondition,
// the automator's one answer of that code to a poll, given before it
// claims: another account's key under an id, or none usable now), or the
// poll reached no automator.
func mayHaveClaimed(err error) bool {
	var u unsentError
	switch status.Code(err) {
	case codes.Unauthenticated, codes.FailedPrecondition:
		return false
	}
	return !errors.As(err, &u)
}

// pollMargin is what a poll's answer is given past the wait it asked for
// (and a fifth of it) to begin to arrive. Tests change it per Agent
// (tuning).
const pollMargin = 5 * time.Second

// noAnswerError is a poll whose answer did not begin within its bound
// (DeadlineExceeded). Sent, its connection had not failed: the proxy's
// keepalive drops one whose pings go unanswered within 15 s, sooner than
// the 41 s of a poll's default bound, and the poll fails as Unavailable.
// Unsent, it never had a connection to go on (grpcwire.Sent): gRPC fails
// a call whose connection's setup failed, so its name resolution produced
// nothing.
type noAnswerError struct {
	within time.Duration
	sent   bool
}

func (e noAnswerError) Error() string {
	if !e.sent {
		return fmt.Sprintf("no connection to the automator was set up within %v to send the poll on", e.within)
	}
	return fmt.Sprintf("the automator did not begin its answer to the poll within %v", e.within)
}

func (e noAnswerError) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.Error())
}

// maxAnswer is the largest answer a poll gets (one gRPC message).
const maxAnswer = 8 << 20

// answerWithin is the time a poll's answer that has begun to arrive is
// given to arrive whole: the largest at minPostRate.
func (t tuning) answerWithin() time.Duration {
	return time.Duration(maxAnswer) * time.Second / time.Duration(t.minPostRate)
}

// pollFor is one poll of this run, bounded by ctx alone.
func (a *Agent) pollFor(ctx context.Context, n int, wait time.Duration, seq, lostFrom uint64) (*automatorv1.PollResponse, error) {
	return a.pollAs(ctx, a.run, n, wait, seq, lostFrom)
}

// pollAs is one poll as the run named run (this one, or an earlier run of
// the instance reporting its lost polls), bounded by ctx alone.
func (a *Agent) pollAs(ctx context.Context, run string, n int, wait time.Duration, seq, lostFrom uint64) (*automatorv1.PollResponse, error) {
	var running []string // another run's are not this process's to list
	if run == a.run {
		running = a.runningIDs()
	}
	return a.o.Client.Poll(ctx, &automatorv1.PollRequest{
		InstanceId: a.o.InstanceID,
		MaxUnits:   int32(n),
		Wait:       durationOf(wait),
		RunId:      run,
		PollSeq:    seq,
		LostFrom:   lostFrom,
		Hostname:   a.o.Hostname,
		Version:    a.o.Version,
		Running:    running,
		KeyIds:     keyIDs(a.o.Keys),
		KeyChecks:  a.checks,
		// Another run's polls are that run's: it stopped long ago.
		Stopping: run == a.run && a.stopping.Load(),
	})
}

// start runs one claim, made at from (claimedAt), in its own goroutine;
// its slot is busy until the result is posted (or given up).
func (a *Agent) start(workCtx context.Context, c *automatorv1.Claim, from time.Time) {
	runCtx, cancel := context.WithCancelCause(workCtx)
	a.mu.Lock()
	a.running[c.GetWorkId()] = cancel
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer func() {
			a.mu.Lock()
			delete(a.running, c.GetWorkId())
			delete(a.told, c.GetWorkId())
			a.mu.Unlock()
			cancel(nil)
			select {
			case a.slotFreed <- struct{}{}:
			default:
			}
		}()
		a.handle(runCtx, workCtx, c, from)
	}()
}

// resumeSpooled posts, in the background, the results an earlier run of
// this instance kept in the spool and could not post, even those past
// their deadline on this host's clock (keepPastDeadline): the automator
// refuses those whose units ended; it drops the expired ones. The records it cannot read
// (a disk error, a mode set wrong, no file descriptor left) stay in place,
// and are read again in the background (rereadSpooled) until ctx ends
// (the proxy stops).
func (a *Agent) resumeSpooled(ctx, postCtx context.Context) {
	due, others, unread := a.spool.loadAll(a.o.InstanceID, time.Now())
	now, mine, late := time.Now(), 0, 0
	for _, p := range due {
		if !p.foreign {
			mine++
			if !now.Before(p.deadline) {
				late++
			}
		}
	}
	if mine > 0 {
		a.log.Info("posting results kept in the spool by an earlier run", "count", mine,
			"past_deadline_on_this_hosts_clock", late)
	}
	for _, id := range slices.Sorted(maps.Keys(others)) {
		// A standby started on a dead proxy's state_dir, or this one
		// under another instance_id: their units ran on that instance,
		// whose results they are.
		a.log.Info("posting results another instance kept in this state_dir: it stopped before it posted them", "other_instance_id", id, "count", others[id])
	}
	for _, p := range due {
		a.resume(postCtx, p)
	}
	if len(unread) > 0 {
		a.track(func() { a.rereadSpooled(ctx, postCtx, unread) })
	}
}

// resume posts, in the background, a result found in the spool, for at
// least latePostFor: its deadline on this host's clock may have passed only
// because the clock stepped forward since it was spooled, and the
// automator, whose clock counts, refuses it if its unit ended.
func (a *Agent) resume(postCtx context.Context, p pending) {
	deadline := p.deadline
	if least := time.Now().Add(latePostFor); deadline.Before(least) {
		deadline = least
	}
	e := a.spool.written(p.req.GetWorkId(), p.path)
	if e != nil {
		e.foreign = p.foreign
	}
	a.track(func() { a.deliver(postCtx, deadline, p.req, e) })
}

// rereadFirst and rereadMax bound the wait before each new read of the
// spooled records the start could not read: it doubles from the first to
// the longest (with jitter, as a failed poll's backoff), so a record that
// becomes readable again (the disk back, the mode set right, file
// descriptors freed) is posted within a minute, while one that stays
// unreadable costs a read a minute. Tests change them per Agent (tuning).
const (
	rereadFirst = time.Second
	rereadMax   = time.Minute
)

// rereadFor is how long the records the start could not read are read
// again: the longest timeout a unit may have (24 h, the automator's
// default limit). Each was written after its unit was claimed, before
// this start, so every unit it can be for has ended by then: read, it
// would only be dropped as expired. Still unreadable then, it stays in
// place for the next start, which reads it again (so does one of a unit
// given longer by an automator configured so). Tests change it per Agent
// (tuning).
const rereadFor = 24 * time.Hour

// rereadSpooled reads again, with backoff, the spooled records that the
// start could not read (unread: each path with its error), and does with
// each that now reads what the start does (loadRecord): posts it, drops
// it as expired, leaves it to its instance, or sets it aside if it does
// not decode. It stops when
// none is left unread, when ctx ends (the proxy stops) or after
// tune.rereadFor, leaving the records still unread in place for the next
// start, and saying so.
func (a *Agent) rereadSpooled(ctx, postCtx context.Context, unread map[string]error) {
	bo := backoff{min: a.o.tune.rereadFirst, max: a.o.tune.rereadMax}
	until := time.Now().Add(a.o.tune.rereadFor)
	paths := slices.Sorted(maps.Keys(unread))
	errs := maps.Clone(unread)
	for len(paths) > 0 {
		wait := bo.next()
		if time.Now().Add(wait).After(until) {
			for _, path := range paths {
				a.log.Error("a record in the spool still cannot be read; left in place, not posted by this run: the next start reads it again",
					"path", path, "err", errs[path], "read_again_for", a.o.tune.rereadFor)
			}
			return
		}
		if !ctxtime.Sleep(ctx, wait) {
			for _, path := range paths {
				a.log.Warn("stopping with a record in the spool that could not be read; left in place: the next start reads it again",
					"path", path, "err", errs[path])
			}
			return
		}
		var still []string
		for _, path := range paths {
			p, workID, fate, err := a.spool.loadRecord(path, a.o.InstanceID, time.Now())
			switch fate {
			case recordUnread:
				errs[path] = err
				still = append(still, path)
			case recordDue, recordOthers:
				a.log.Info("a record in the spool that could not be read reads now: posting its result", "path", path, "work_id", workID, "of_instance_id", p.req.GetInstanceId())
				a.resume(postCtx, p)
			case recordExpired:
				a.log.Warn("dropped a spooled result far past its deadline, read only now; the automator has ended its unit", "path", path, "work_id", workID, "past_deadline_by", keepPastDeadline)
			}
		}
		paths = still
	}
}

// ended kills a running unit the automator said ended (cancelled, timed
// out). Polls list it no more: the automator, which said so, need not say
// it again while the script is being killed.
func (a *Agent) ended(id string) {
	a.mu.Lock()
	c := a.running[id]
	if c != nil {
		a.told[id] = struct{}{}
	}
	a.mu.Unlock()
	if c != nil {
		c(errCancelledByAutomator)
	}
}

func (a *Agent) cancelAll(cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.running {
		c(cause)
	}
}

func (a *Agent) isRunning(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.running[id]
	return ok
}

func (a *Agent) runningIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.running))
	for id := range a.running {
		if _, ok := a.told[id]; !ok {
			ids = append(ids, id)
		}
	}
	return ids
}

func (a *Agent) inFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.running)
}

// LastPoll is when a poll last succeeded (zero if never).
func (a *Agent) LastPoll() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastPoll
}

// keyChecks returns the key check of each key of ring, in the order of
// keyIDs(ring); nil when ring lists no key, or one it cannot give.
func keyChecks(ring crypto.KeyRing) [][]byte {
	var checks [][]byte
	for _, id := range keyIDs(ring) {
		k, ok := ring.Key(id)
		if !ok {
			return nil
		}
		checks = append(checks, crypto.KeyCheck(k))
	}
	return checks
}

// keyIDs lists the ids of the keys in the ring, for each poll: the
// automator then hands this instance only commands sealed with a key it
// holds (sealed again for it during a key rotation).
func keyIDs(ring crypto.KeyRing) []uint32 {
	if ks, ok := ring.(interface{ IDs() []uint32 }); ok {
		return ks.IDs()
	}
	return nil
}

// claimedAt is when the claims of resp, a poll's answer, are taken to have
// been made, on this host's clock: the poll's sending (sent: when its
// request was written to a connection, SendTimes) plus the time
// the automator held it (PollResponse.held) when that is earlier than
// arrived (when the answer was read: freezeWatch.arrived), which is later
// by the request's way to the automator and the answer's back. Counted from
// arrived, a claim's remaining time let its script run past the unit's
// deadline by that transit, seconds over a slow link (a review); counted
// from sent plus held, the script ends by the deadline, and its result is
// on its way by then. An automator predating held gives none: arrived.
func claimedAt(sent, arrived time.Time, resp *automatorv1.PollResponse) time.Time {
	h := resp.GetHeld()
	if h == nil || h.CheckValid() != nil || h.AsDuration() < 0 {
		return arrived
	}
	if at := sent.Add(h.AsDuration()); at.Before(arrived) {
		return at
	}
	return arrived
}
