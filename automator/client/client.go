// Package client is the Go client of the automator: executeOnProxy and the
// calls around it (Submit, Wait, Get, Cancel) for Go callers.
//
//	c, err := client.New(client.Config{
//		Addresses: []string{"https://automator.example:8443"},
//		APIKey:    apiKey,
//		CAFile:    "ca.pem",
//	})
//	...
//	res, err := c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "hello.sh", Args: []string{"world"}})
//	switch {
//	case errors.Is(err, client.ErrTimeout): // no result before the deadline
//	case errors.Is(err, client.ErrFailed): // the proxy could not run it
//	case errors.Is(err, client.ErrCancelled):
//	case err != nil: // the call itself (auth, unknown account, connection)
//	}
//
// A caller never submits twice by accident: every submit carries an
// idempotency key (the caller's, or one the client makes), so a submit
// whose answer was lost is retried safely, on the same automator or
// another; and ExecuteOnProxy waits by work id, so a connection that drops
// while it waits is replaced and the wait resumes, on another address when
// the first is unavailable.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/ctxtime"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/racedial"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// maxMessage bounds one message each way: a result with both output
// streams at the proxy's caps fits.
const maxMessage = 8 << 20

// Client calls one or more automators. It is safe for concurrent use.
type Client struct {
	retryFor time.Duration
	urls     []string
	conns    []*grpc.ClientConn
	apis     []automatorv1.AutomatorServiceClient
	// certs tell, per address, whether its last connection failed because
	// its certificate did not verify.
	certs []*certCheck
	// watches hold, per address, why its last connection did not reach
	// an automator that answers (nil once one answers), and when
	// anything last came from it.
	watches []*addrWatch
	// onUnreachable is Config.OnUnreachable.
	onUnreachable func(Unreachable)
	// next is the address the next call starts with: the last one that
	// answered.
	next atomic.Int64
	// closed is set by Close: a call cut by it is not retried.
	closed atomic.Bool
	// firstPause and lastPause are a call's first pause between two
	// rounds of tries, and the most it doubles to.
	firstPause, lastPause time.Duration
}

// New makes a Client. Connections are opened lazily, on the first call.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	caPEM, err := cfg.caPEM()
	if err != nil {
		return nil, err
	}
	c := &Client{retryFor: cfg.RetryFor, onUnreachable: cfg.OnUnreachable, firstPause: 50 * time.Millisecond, lastPause: 2 * time.Second}
	if cfg.retryPause > 0 {
		c.firstPause, c.lastPause = cfg.retryPause, cfg.retryPause
	}
	if c.retryFor == 0 {
		c.retryFor = defaultRetryFor
	}
	for _, a := range cfg.Addresses {
		t, _ := parseAddress(a) // validated
		check, w := &certCheck{}, &addrWatch{}
		cc, err := dial(cfg, t, caPEM, check, w)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("automator %s: %w", a, err)
		}
		c.urls = append(c.urls, a)
		c.certs = append(c.certs, check)
		c.watches = append(c.watches, w)
		c.conns = append(c.conns, cc)
		c.apis = append(c.apis, automatorv1.NewAutomatorServiceClient(cc))
	}
	return c, nil
}

func dial(cfg Config, t target, caPEM []byte, check *certCheck, w *addrWatch) (*grpc.ClientConn, error) {
	creds := grpcwire.LoopbackOnly(insecure.NewCredentials())
	if !t.plaintext {
		name := cfg.ServerName
		if name == "" {
			name = t.host
		}
		tlsCfg, err := pki.ClientTLS(caPEM, name)
		if err != nil {
			return nil, fmt.Errorf("CA certificate: %w", err)
		}
		creds = checkedTLS{TransportCredentials: credentials.NewTLS(tlsCfg), check: check}
	}
	opts := append(grpcwire.DialOptions(),
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(cfg.APIKey, !t.plaintext)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		// A try's bound is for its answer to begin (answerBegins).
		// A connection that dies silently during a long wait is noticed
		// within 20 s, and the wait resumes on a new one.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		// Reconnect quickly after an automator restart: the defaults back
		// off up to two minutes. The setup has gRPC's default 20 s, its
		// TLS handshake 5 s of it (checkedTLS), so a link with a round
		// trip of up to about 5 s connects.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           reconnectBackoff(cfg.reconnectWait),
			MinConnectTimeout: grpcwire.SetupWithin,
		}),
	)
	opts = append(opts, grpcwire.WatchAnswers()...)
	dialer := cfg.Dial
	if dialer == nil {
		dialer = racedial.Dialer{}.DialContext
	}
	opts = append(opts, grpc.WithContextDialer(watchedDialer(dialer, check, w, t.plaintext)))
	return grpc.NewClient("passthrough:///"+t.hostPort, opts...)
}

// reconnect is gRPC's wait between the attempts to connect to an address
// that refuses or fails them. A call retried (Client.call) cuts it short,
// at its own pace.
var reconnect = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second}

// reconnectBackoff is reconnect, or with wait (when set) its least and
// greatest wait.
func reconnectBackoff(wait time.Duration) backoff.Config {
	b := reconnect
	if wait > 0 {
		b.BaseDelay, b.MaxDelay = wait, wait
	}
	return b
}

// watchedDialer is the dialer of one address's connections: dialer's,
// watched (watch), with the TCP_USER_TIMEOUT gRPC would have set on them
// unwrapped.
func watchedDialer(dialer func(context.Context, string) (net.Conn, error), check *certCheck, w *addrWatch, plaintext bool) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		check.err.Store(nil) // a new connection: what failed the last one is past
		w.dialing.Add(1)
		conn, err := dialer(ctx, addr)
		w.dialing.Add(-1)
		if err != nil {
			w.trouble.Store(&trouble{kind: KindNotConnected, err: err})
			return nil, err
		}
		if err := setUserTimeout(conn, keepaliveTimeout); err != nil {
			conn.Close()
			return nil, err
		}
		// The trouble of the last connection stays until this one hears
		// from the automator: one that accepts and answers nothing (its
		// process stopped, the kernel accepting for it) is still hung.
		return watch(conn, w, plaintext), nil
	}
}

// certCheck holds the error of the last TLS handshake with one address
// when the automator's certificate did not verify: gRPC reports it as
// Unavailable, like an automator that is down, but no retry mends it.
type certCheck struct {
	err atomic.Pointer[error]
}

// failed returns the certificate error of the address's last connection,
// if that is why it failed.
func (c *certCheck) failed() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// checkedTLS is TLS that notes a certificate that does not verify, its
// handshake given grpcwire.HandshakeWithin; over a watchedConn, it tells
// it how TLS went (tlsWatched, tlsFailed).
type checkedTLS struct {
	credentials.TransportCredentials
	check *certCheck
}

func (t checkedTLS) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := grpcwire.Handshake(ctx, grpcwire.HandshakeWithin, t.TransportCredentials, authority, raw)
	if v := (*tls.CertificateVerificationError)(nil); errors.As(err, &v) {
		t.check.err.Store(&err)
	}
	if w, ok := raw.(*watchedConn); ok {
		if err != nil {
			w.tlsFailed(err)
			return conn, info, err
		}
		conn = &tlsWatched{Conn: conn, raw: w}
	}
	return conn, info, err
}

// Close closes the connections. Calls in progress fail.
func (c *Client) Close() error {
	c.closed.Store(true)
	var errs []error
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

// ExecuteOnProxy runs cmd on one proxy instance of account and returns its
// result. It submits the command (see Submit) and waits for the unit to
// end, resuming the wait on a new connection, or another address, when a
// connection drops.
//
// A unit that did not succeed is an error matching ErrTimeout, ErrFailed or
// ErrCancelled (a *WorkError with the work id and reason); for one that
// failed after its script ran in part (killed when its proxy stopped, its
// grace period over) the Result holds what the script wrote until then,
// and its ExitCode is 0. When ctx ends
// first, the unit is cancelled, so its script does not run on unobserved,
// and the error matches both ErrCancelled and ctx.Err() (unless the unit
// ended just before: then its outcome is returned). That holds when ctx ends
// while the submit is on its way too: the automator may have stored the
// unit already, so the submit's answer is still awaited (within its bound
// of 10 s), and the unit it names cancelled. A submit refused for the
// account's full queue is made again while ctx's deadline allows, as
// Submit's; the error matches ErrQueueFull when it is not.
func (c *Client) ExecuteOnProxy(ctx context.Context, account string, cmd Command, opts ...Option) (Result, error) {
	w, err := c.submit(ctx, account, cmd, true, opts...)
	if err != nil {
		return Result{}, err
	}
	if f := collect(opts).onQueued; f != nil {
		f(w.ID, w.waitUntil)
	}
	// The wait and the cancel that may follow it are one call to the
	// caller: OnUnreachable, told by the wait, is not told again by the
	// cancel.
	b := &budget{deadline: w.waitUntil}
	w, err = c.wait(ctx, w.ID, b)
	if err == nil {
		return w.outcome()
	}
	if ctx.Err() == nil {
		return Result{WorkID: w.ID, LocalDeadline: b.deadline}, err
	}
	// The cancel starts on the automator the wait was on, which may be
	// the reason the wait got nowhere (hung): it has one try of tryBound
	// on each address, so that a hung one is given up for the next.
	within := time.Duration(len(c.apis))*tryBound + time.Second
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), within)
	defer cancel()
	cw, cerr := c.cancel(cctx, w.ID, b)
	if cerr != nil && cctx.Err() != nil && errors.Is(cerr, context.DeadlineExceeded) {
		// Its own bound, not the caller's: said in words.
		cerr = fmt.Errorf("no automator answered its cancel within %v", within)
	}
	if cerr != nil {
		return Result{WorkID: w.ID, LocalDeadline: b.deadline}, fmt.Errorf("work %s: %w; cancelling it: %w", w.ID, ctx.Err(), cerr)
	}
	if !cw.State.Terminal() {
		// Answered open: a cancel past the deadline on an automator of
		// before 2026-12-07, whose expiry passed over the unit (another
		// session held it). It is not a success (a review: exec exited 0
		// for a unit that never ran); its end is not known yet.
		return Result{WorkID: w.ID, LocalDeadline: b.deadline}, fmt.Errorf("work %s: %w; its cancel answered it still %s: its end is not known yet", w.ID, ctx.Err(), cw.State)
	}
	res, err := cw.outcome()
	var we *WorkError
	if errors.As(err, &we) && we.State == StateCancelled {
		we.cause = ctx.Err()
	}
	return res, err
}

// Submit queues cmd for account and returns the queued unit at once. The
// submit carries an idempotency key, the caller's (WithIdempotencyKey) or
// a fresh one, so retrying it after a lost answer cannot queue a second
// unit: the automator returns the first.
//
// An automator that refuses the unit because the account's queue is full
// (ErrQueueFull) queued nothing and says when to submit again (RetryDelay).
// When ctx has a deadline, Submit waits that long (100 ms at least, plus up
// to a fifth, so that callers refused together spread out) and submits again, with the
// same idempotency key, for as long as the next try can begin before the
// deadline; then, or at once when ctx has no deadline, it returns the last
// refusal, which matches ErrQueueFull: a full queue is never hidden behind
// the context's DeadlineExceeded. ExecuteOnProxy's submit does the same.
func (c *Client) Submit(ctx context.Context, account string, cmd Command, opts ...Option) (Work, error) {
	return c.submit(ctx, account, cmd, false, opts...)
}

// submit is Submit; with outlive, a try on its way when ctx ends is not
// cut short but awaited, within tryBound, so that the caller learns of a
// unit the automator stored (and can cancel it). No try is begun after.
func (c *Client) submit(ctx context.Context, account string, cmd Command, outlive bool, opts ...Option) (Work, error) {
	o := collect(opts)
	if o.key == "" {
		o.key = newKey()
	}
	if err := checkText(account, cmd, o); err != nil {
		return Work{}, wrapCall(fmt.Sprintf("submitting work to account %q", account), err)
	}
	req := &automatorv1.ExecuteRequest{
		Account:        account,
		Command:        &automatorv1.Command{Script: cmd.Script, Args: cmd.Args, Stdin: o.stdin, Env: o.env},
		IdempotencyKey: o.key,
	}
	if o.timeout != 0 { // a negative one is the automator's to refuse
		req.Timeout = durationpb.New(o.timeout)
	}
	var st *automatorv1.WorkStatus
	size := proto.Size(req)
	doing := fmt.Sprintf("submitting work to account %q", account)
	// sent: a try was given to a connection, so an automator may have
	// stored the unit though no answer came. answer is the last try's,
	// when an automator answered that its database could not serve it.
	sent := false
	var answer error
	for {
		err := c.call(ctx, doing, nil, func(ctx context.Context, api automatorv1.AutomatorServiceClient) (err error) {
			tryCtx := ctx
			if outlive {
				if err := ctx.Err(); err != nil {
					return err // no try is begun once ctx has ended
				}
				tryCtx = context.WithoutCancel(ctx)
			}
			tctx, cancel := answerBegins(tryCtx, sendBound(size))
			defer cancel()
			st, err = api.Submit(tctx, req)
			if !grpcwire.Unsent(tctx) {
				sent = true
			}
			if answer = nil; databaseUnreachableAnswer(err) {
				answer = err
			}
			return unanswered(ctx, tctx, err)
		})
		if err == nil {
			return workFromProto(st), nil
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Ended by the caller: whether a unit may exist is what it
			// needs to know.
			switch {
			case !sent:
				return Work{}, fmt.Errorf("%w; it reached no automator: nothing was queued", err)
			case answer != nil:
				return Work{}, fmt.Errorf("%w; the automator's last answer: %s", err, status.Convert(answer).Message())
			}
			return Work{}, fmt.Errorf("%w; no answer came to it: the automator may have queued the unit (submitted again with the same idempotency key, it returns that unit rather than queue another)", err)
		}
		// The account's queue is full: nothing was queued. Submitted again
		// after the delay the automator asks for (with the same key, so
		// that a unit stored meanwhile by a try whose answer was lost is
		// returned, not queued again), while ctx's deadline leaves time
		// for it; never without a deadline, nor past it: the refusal is
		// the caller's to see.
		var ce *callError
		if !errors.As(err, &ce) {
			return Work{}, err
		}
		delay, full := queueFull(ce.st)
		if !full {
			return Work{}, err
		}
		delay = max(delay, leastResubmitWait)
		wait := delay + jitter(delay)
		if end, ok := ctx.Deadline(); !ok || !time.Now().Add(wait).Before(end) {
			return Work{}, err
		}
		if !ctxtime.Sleep(ctx, wait) {
			return Work{}, fmt.Errorf("%w; waiting to submit again: %w", err, ctx.Err())
		}
	}
}

// leastResubmitWait is the least a submit refused for a full queue waits
// before it is made again, whatever the automator says (it says 1 s): a
// delay of nothing would make the wait a busy loop against it.
const leastResubmitWait = 100 * time.Millisecond

// jitter is a random part of up to a fifth of delay, added to it so that
// callers refused together do not all submit again at the same moment.
func jitter(delay time.Duration) time.Duration {
	if delay < 5 {
		return 0
	}
	return mrand.N(delay / 5)
}

// Wait blocks until unit id ends and returns it; a unit that did not
// succeed is not an error here (see Work.Err). It reads the unit first (its
// deadline), then waits. A dropped connection is replaced and the wait
// resumes; an automator that has not begun its answer by a second past the
// unit's deadline (hung, with its connection open) is given up for the
// next, but an answer on its way (a large result over a thin link) is
// given the time it takes.
func (c *Client) Wait(ctx context.Context, id string) (Work, error) {
	if err := checkWorkID(id); err != nil {
		return Work{ID: id}, err
	}
	return c.wait(ctx, id, &budget{})
}

// wait is Wait under budget b, whose deadline, when known, is the unit's
// on this process's clock (localDeadline).
func (c *Client) wait(ctx context.Context, id string, b *budget) (Work, error) {
	var st *automatorv1.WorkStatus
	// Without the unit's deadline, the first try reads it.
	resumed := b.deadline.IsZero()
	err := c.call(ctx, "waiting for work "+id, b, func(ctx context.Context, api automatorv1.AutomatorServiceClient) (err error) {
		// An automator may hang (stopped, frozen, cut off from its
		// database) with its connection open: nothing answers and
		// nothing is reset, so only the keepalive would give it up, 20
		// s later. Once the unit's deadline has passed, its end is
		// known to every automator that can answer: a try that has no
		// answer by then gives this one up for the next.
		if resumed {
			// The last wait was cut. An automator that answers a read
			// now is there: the retry budget starts again from the
			// next cut, so a wait held for long and then cut (a load
			// balancer that cuts long calls, replicas restarted one
			// after another) is resumed each time. The read also tells
			// the deadline (the budget lasts past it) and whether the
			// unit ended meanwhile.
			rctx, cancel := tryUntil(ctx, b.deadline, readBound)
			g, err := api.Get(rctx, &automatorv1.GetRequest{WorkId: id})
			cancel()
			if err != nil {
				return overdueAnswer(unanswered(ctx, rctx, err), b.deadline)
			}
			b.answered(localDeadline(g))
			if stateFromProto(g.GetState()).Terminal() {
				st = g
				return nil
			}
		}
		resumed = true
		wctx, cancel := tryUntil(ctx, b.deadline, 0)
		defer cancel()
		st, err = api.Wait(wctx, &automatorv1.WaitRequest{WorkId: id})
		return overdueAnswer(unanswered(ctx, wctx, err), b.deadline)
	})
	if err != nil {
		return Work{ID: id}, err
	}
	return workFromProto(st), nil
}

// overdue is how long past a unit's deadline (or past the start of a try
// begun after it) a wait's try waits for an answer from one automator to
// begin before it asks the next; readBound bounds a read of a unit whose
// deadline is not known yet. Each bound of a try is for its answer to
// begin (answerBegins).
const (
	overdue   = time.Second
	readBound = 5 * time.Second
	// tryBound bounds one try of a call an automator answers at once
	// (Submit, Get, Cancel): a hung one is given up for the next
	// address after it, not after the keepalive's 20 s. A submit repeated
	// on the next address carries the same idempotency key.
	tryBound = 10 * time.Second
	// minSendRate, in bytes a second, is the slowest link a try is given
	// time for (64 kbit/s), each way: past tryBound, its request's size
	// (sendBound); once its answer has begun, the largest answer's
	// (answerWithin). A submit carrying a large stdin over a thin link
	// (1 MiB: 35 s at 256 kbit/s) was cut off at tryBound and sent again
	// from its first byte until RetryFor; a wait whose unit ended near its
	// deadline with a large result was cut off overdue past it, and read
	// again from its first byte until RetryFor, the unit having succeeded.
	minSendRate = 8 << 10
	// answerWithin is the time an answer that has begun to arrive is
	// given to arrive whole: the largest (maxMessage) at minSendRate.
	answerWithin = maxMessage * time.Second / minSendRate
)

// answerBegins bounds a try whose answer must begin to arrive within
// bound (its headers come: grpcwire.AnswerStarts), and then has
// answerWithin to arrive whole. An automator that hangs with its
// connection open sends nothing, and is given up after bound.
//
// Two things stretch bound, for an automator that is slow, not hung.
// Each try of a call at an address where an earlier try of the call went
// unanswered is given twice as long as that one (up to 2^maxPatience
// times bound): an automator on a loaded machine may take longer than
// bound to read and open a large result, and a try given up again and
// again with the same bound would never be answered (its work begun
// again each time, the given-up tries' work still running). And past
// bound, a try over a connection that is still delivering (its answer
// queued behind others on a thin link) waits until it has delivered
// nothing for grpcwire.Quiet.
func answerBegins(ctx context.Context, bound time.Duration) (context.Context, context.CancelFunc) {
	var heard func() time.Time
	if t, ok := ctx.Value(tryKey{}).(tryTo); ok {
		heard = t.watch.lastHeard
		bound <<= min(t.unanswered, maxPatience)
	}
	return grpcwire.BeginWithinUnlessHeard(context.WithValue(ctx, beganKey{}, tryBegan{at: time.Now(), bound: bound}), bound, answerWithin, heard)
}

// maxPatience is how many times at most a try's bound is doubled for the
// tries at its address that went unanswered before it (answerBegins).
const maxPatience = 3

// tryKey is the key of a try's tryTo in its context (call).
type tryKey struct{}

// tryTo is what a try knows of the address it goes to: its watch, and
// how many of the call's tries there went unanswered before it.
type tryTo struct {
	watch      *addrWatch
	unanswered int
}

// beganKey is the key of a try's tryBegan in its context (answerBegins).
type beganKey struct{}

// tryBegan is when a try bounded by answerBegins began, and its bound.
type tryBegan struct {
	at    time.Time
	bound time.Duration
}

// sendBound bounds a try that sends size bytes (sendBound(0) is tryBound).
func sendBound(size int) time.Duration {
	return tryBound + time.Duration(size)*time.Second/minSendRate
}

// tryUntil bounds one try of a wait: its answer must begin overdue past
// the unit's deadline, or past now when that is later; without a
// deadline, bound past now (no bound when bound is 0).
func tryUntil(ctx context.Context, deadline time.Time, bound time.Duration) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		if bound == 0 {
			return context.WithCancel(ctx)
		}
		return answerBegins(ctx, bound)
	}
	if now := time.Now(); deadline.Before(now) {
		deadline = now
	}
	return answerBegins(ctx, time.Until(deadline.Add(overdue)))
}

// unanswered turns a try that ran out of its own time (tctx, made by
// answerBegins or tryUntil), while the caller's ctx goes on, into
// Unavailable: the automator did not answer, and the next one is asked.
func unanswered(ctx, tctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if errors.Is(context.Cause(tctx), grpcwire.ErrNoAnswer) {
		began, _ := tctx.Value(beganKey{}).(tryBegan)
		na := noAnswer{st: status.New(codes.Unavailable, "the automator did not begin its answer in time"), began: began.at, bound: began.bound}
		if errors.Is(context.Cause(tctx), grpcwire.ErrNoAnswerOnceQuiet) && !began.at.IsZero() {
			na.waitedBusy = since(began.at)
		}
		return na
	}
	if status.Code(err) == codes.DeadlineExceeded {
		return status.Errorf(codes.Unavailable, "the automator did not answer in time: %v", status.Convert(err).Message())
	}
	return err
}

// noAnswer is a try given up because its answer did not begin within its
// bound: Unavailable, the automator hung (OnUnreachable is told so, and
// why, when set: how the bound came). began is when the try's call
// began, and bound its bound, when known.
type noAnswer struct {
	st    *status.Status
	why   error
	began time.Time
	bound time.Duration
	// waitedBusy, when not 0, is how long the try waited for its answer
	// past its bound, its connection delivering other data, until it
	// delivered nothing for grpcwire.Quiet (answerBegins).
	waitedBusy time.Duration
}

// overdueAnswer is err, of a try of a wait whose bound was the unit's
// deadline (overdue past it, or past the try's start when that was
// later), telling so when the try went unanswered: a wait's answer is due
// when its unit ends, which it has by its deadline, not within a time of
// its own.
func overdueAnswer(err error, deadline time.Time) error {
	var na noAnswer
	if deadline.IsZero() || !errors.As(err, &na) {
		return err
	}
	na.why = fmt.Errorf("it has not told how the unit ended, though the unit's deadline (%s) has passed", deadline.Format(time.TimeOnly))
	return na
}

func (e noAnswer) Error() string              { return e.st.Err().Error() }
func (e noAnswer) GRPCStatus() *status.Status { return e.st }

// Get returns unit id's status now.
func (c *Client) Get(ctx context.Context, id string) (Work, error) {
	if err := checkWorkID(id); err != nil {
		return Work{ID: id}, err
	}
	var st *automatorv1.WorkStatus
	err := c.call(ctx, "getting work "+id, nil, func(ctx context.Context, api automatorv1.AutomatorServiceClient) (err error) {
		tctx, cancel := answerBegins(ctx, tryBound)
		defer cancel()
		st, err = api.Get(tctx, &automatorv1.GetRequest{WorkId: id})
		return unanswered(ctx, tctx, err)
	})
	if err != nil {
		return Work{ID: id}, err
	}
	return workFromProto(st), nil
}

// Cancel ends unit id as cancelled if it is queued or claimed (its proxy
// kills the script's process tree) and returns it. A unit that already
// ended is returned unchanged.
func (c *Client) Cancel(ctx context.Context, id string) (Work, error) {
	if err := checkWorkID(id); err != nil {
		return Work{ID: id}, err
	}
	return c.cancel(ctx, id, nil)
}

// cancel is Cancel under budget b (a new one when nil).
func (c *Client) cancel(ctx context.Context, id string, b *budget) (Work, error) {
	var st *automatorv1.WorkStatus
	err := c.call(ctx, "cancelling work "+id, b, func(ctx context.Context, api automatorv1.AutomatorServiceClient) (err error) {
		tctx, cancel := answerBegins(ctx, tryBound)
		defer cancel()
		st, err = api.Cancel(tctx, &automatorv1.CancelRequest{WorkId: id})
		return unanswered(ctx, tctx, err)
	})
	if err != nil {
		return Work{ID: id}, err
	}
	return workFromProto(st), nil
}

// budget is how long a call keeps retrying while no automator answers.
type budget struct {
	// deadline is the unit's, when known: a wait retries until RetryFor
	// past it, when its outcome is known for sure.
	deadline time.Time
	// giveUp is when the call stops retrying; zero until a try fails
	// after the last answer.
	giveUp time.Time
	// told is set once OnUnreachable was told of this budget's retries.
	told bool
}

// answered tells that an automator answered a try under way (and the
// unit's deadline, when it is known): the budget starts again from the
// next failure. A unit's deadline does not move: the earliest told is
// kept. A later one is a later answer's trip, or an answer past the
// deadline, whose time left is 0 however long ago it passed (each read of
// a unit an automator failed to time out, its disk full, moved the
// deadline to the read, and the budget with it).
func (b *budget) answered(deadline time.Time) {
	b.giveUp, b.told = time.Time{}, false
	if !deadline.IsZero() && (b.deadline.IsZero() || deadline.Before(b.deadline)) {
		b.deadline = deadline
	}
}

// call runs f against one automator after another, starting with the last
// that answered, until f succeeds, fails for good, ctx ends or no
// automator has answered for the retry budget (counted from the first
// failure since the last answer, and never ending before the unit's
// deadline plus the budget when the deadline is known). b, when not nil,
// is the call's budget, which f may restart (budget.answered). Every call
// here is safe to repeat: submits carry an idempotency key, the others are
// reads or idempotent.
func (c *Client) call(ctx context.Context, doing string, b *budget, f func(context.Context, automatorv1.AutomatorServiceClient) error) error {
	if b == nil {
		b = &budget{}
	}
	n := int64(len(c.apis))
	start := c.next.Load()
	delay := c.firstPause
	wokeEarly := false // a pause of this call ended early (pause)
	// untrusted marks the addresses whose certificate did not verify:
	// this call tries them no more.
	untrusted := make([]bool, n)
	left, tried := n, int64(0)
	// unreachable is the last address of this round of tries that could
	// not be connected to, or did not answer, for OnUnreachable; when it
	// did not answer a try over a connection it had not been heard from
	// over since, stuck is that try, to find out before it is told
	// whether the automator is there (stuckIn).
	var unreachable *Unreachable
	var stuck *unansweredTry
	// unansweredAt counts, per address, this call's tries there whose
	// answer did not begin within their bound (answerBegins).
	unansweredAt := make([]int, n)
	for attempt := int64(0); ; attempt++ {
		i := (start + attempt) % n
		if untrusted[i] {
			continue
		}
		tried++
		began := time.Now()
		err := f(context.WithValue(ctx, tryKey{}, tryTo{watch: c.watches[i], unanswered: unansweredAt[i]}), c.apis[i])
		if err == nil {
			c.next.Store(i)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", doing, ctx.Err())
		}
		if !retryable(err) || c.closed.Load() {
			return wrapCall(doing, err)
		}
		if c.certs[i].failed() != nil {
			untrusted[i] = true
			if left--; left == 0 {
				return wrapCall(fmt.Sprintf("%s: automator %s: its certificate does not verify against the CA certificate given (the automator data directory's ca.pem: --ca, or Config.CAPEM or CAFile), or does not name the host dialed (Config.ServerName)", doing, c.urls[i]), err)
			}
		}
		if b.giveUp.IsZero() {
			b.giveUp = time.Now().Add(c.retryFor)
			if !b.deadline.IsZero() && b.deadline.Add(c.retryFor).After(b.giveUp) {
				b.giveUp = b.deadline.Add(c.retryFor)
			}
		}
		if time.Now().After(b.giveUp) {
			if databaseUnreachableAnswer(err) {
				// They answered: that they could not serve it.
				return wrapCall(doing+" (no automator could serve it, its database unreachable; giving up)", err)
			}
			if p := c.watches[i].trouble.Load(); p != nil && !strings.Contains(err.Error(), p.err.Error()) {
				// What went wrong there, as OnUnreachable was told it,
				// unless the error says it already (a refused dial):
				// the transport's own words ("error reading server
				// preface: EOF") lose it (a review: an http:// URL of a
				// TLS automator).
				return wrapCall(fmt.Sprintf("%s (no automator answered; giving up) at %s: %v", doing, c.urls[i], p.err), err)
			}
			return wrapCall(doing+" (no automator answered; giving up)", err)
		}
		var na noAnswer
		if errors.As(err, &na) {
			unansweredAt[i]++
		}
		if p := c.watches[i].trouble.Load(); p != nil {
			unreachable = &Unreachable{Address: c.urls[i], Err: p.err, Kind: p.kind, Hung: p.kind.hung()}
			stuck = nil
		} else if errors.As(err, &na) && na.why == nil && c.watches[i].dialing.Load() > 0 {
			// The try waited for a connection whose dial goes
			// unanswered: nothing accepted it, so nothing is stuck or
			// silent there (it was told as an automator not answering
			// its call).
			unreachable = &Unreachable{Address: c.urls[i], Kind: KindNotConnected,
				Err: fmt.Errorf("no connection to it was made within %v: its dial goes unanswered (its host down, or the packets dropped on the way: a firewall?)", since(began))}
			stuck = nil
		} else if errors.As(err, &na) {
			why := na.why
			switch {
			case why != nil:
			case na.waitedBusy != 0:
				why = fmt.Errorf("its answer did not begin within %v, though its connection delivered other data past its bound of %v, until nothing came for %v", na.waitedBusy, na.bound.Round(100*time.Millisecond), grpcwire.Quiet)
			case na.bound >= time.Second:
				// A send's bound counts its bytes: 10.007s for a small one.
				why = fmt.Errorf("its answer did not begin within %v", na.bound.Round(100*time.Millisecond))
			default:
				why = fmt.Errorf("its answer did not begin within %v", since(began))
			}
			unreachable = &Unreachable{Address: c.urls[i], Err: why, Kind: KindCallUnanswered, Hung: true}
			stuck = &unansweredTry{addr: i, began: na.began}
		} else if st, ok := status.FromError(err); ok && databaseUnreachableAnswer(err) {
			// It answered, that it cannot serve the call: said as
			// promptly as an automator that cannot be reached (it was
			// silent for the budget's minute).
			unreachable = &Unreachable{Address: c.urls[i], Err: errors.New(strings.TrimSuffix(st.Message(), "; retry")), Kind: KindDatabaseUnreachable}
			stuck = nil
		}
		// Each address once at full speed, then back off.
		if tried >= left {
			tried = 0
			if unreachable != nil && !b.told && c.onUnreachable != nil {
				b.told = true
				// A connection that answered while the call did not (a
				// ping, another call), or answers a probe now, has the
				// automator behind it: the call is stuck in it.
				if stuck != nil && c.stuckIn(ctx, stuck) {
					unreachable.Kind = KindCallStuck
					unreachable.Err = fmt.Errorf("%w; its connection answered meanwhile", unreachable.Err)
				}
				unreachable.Doing, unreachable.Until = doing, b.giveUp
				if end, ok := ctx.Deadline(); ok && end.Before(b.giveUp) {
					unreachable.Until = end
				}
				c.onUnreachable(*unreachable)
			}
			unreachable, stuck = nil, nil
			ok, early := c.pause(ctx, delay, !wokeEarly)
			if !ok {
				return fmt.Errorf("%s: %w", doing, ctx.Err())
			}
			wokeEarly = wokeEarly || early
			delay = min(2*delay, c.lastPause)
		}
	}
}

// pause waits d between two rounds of a call's tries, and reports
// whether ctx allowed it (ok), and whether it ended early (early). The
// connections that failed are dialled anew meanwhile, not when gRPC's own
// wait between connection attempts (up to 3.6 s) ends, and, with
// mayEndEarly, the pause ends once one of them is set up: an automator
// back from a restart was used up to 8 s after it served again (a soak),
// now within gRPC's first waits after the reset (100 ms, then growing).
// A call's pauses end early once at most: an automator that fails each
// call and drops its connection would otherwise be called again at the
// pace its connections are set up.
func (c *Client) pause(ctx context.Context, d time.Duration, mayEndEarly bool) (ok, early bool) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var up atomic.Bool
	for _, cc := range c.conns {
		if cc.GetState() != connectivity.TransientFailure {
			continue
		}
		cc.ResetConnectBackoff()
		if !mayEndEarly {
			continue
		}
		go func() {
			for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
				if !cc.WaitForStateChange(wctx, s) {
					return
				}
			}
			up.Store(true)
			cancel()
		}()
	}
	<-wctx.Done()
	return ctx.Err() == nil, up.Load()
}

// databaseUnreachableAnswer tells whether err is an automator's answer,
// UNAVAILABLE, that its database does not answer (automator/server's
// words).
func databaseUnreachableAnswer(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.HasPrefix(st.Message(), "the automator's database ")
}

// unansweredTry is a try whose answer did not begin within its bound, on
// address addr, begun at began (zero when not known).
type unansweredTry struct {
	addr  int64
	began time.Time
}

// probeBound bounds the probe of a connection over which a try went
// unanswered (stuckIn): an automator that runs answers it at once, over a
// link of a round trip of up to about 2 s.
const probeBound = 2 * time.Second

// stuckIn tells whether the automator behind the connection of try, which
// went unanswered, is there: whether anything came over the connection
// after the try began (a ping's answer, another call's), or else comes in
// answer to a probe on it, within probeBound. The probe is a call of the
// standard health service's Check, which needs no credentials: an
// automator that runs answers it (with its health, within 1 s even when
// its database does not answer; or, one of a release that does not serve
// that service, Unimplemented), even while its calls are stuck, waiting on
// its database say; a stopped or frozen one, or one
// whose packets are dropped, does not. The keepalive alone does not tell:
// it pings 10 s after the last bytes came, so the answer to its ping comes
// after a short call's try (Submit, Get, Cancel: 10 s) begun as the last
// answer came is given up.
func (c *Client) stuckIn(ctx context.Context, try *unansweredTry) bool {
	began := try.began
	if began.IsZero() {
		began = time.Now()
	}
	w := c.watches[try.addr]
	if w.heard.Load() > began.UnixNano() {
		return true
	}
	pctx, cancel := context.WithTimeout(ctx, probeBound)
	defer cancel()
	_, _ = healthpb.NewHealthClient(c.conns[try.addr]).Check(pctx, &healthpb.HealthCheckRequest{})
	return w.heard.Load() > began.UnixNano()
}

// retryable: the automator could not be reached, or dropped the call (its
// connection broke, or it is shutting down), or something between ended it
// as cancelled while the caller's context was alive (a load balancer
// resetting the stream with RST_STREAM CANCEL; call checks the context
// first). The call may or may not have taken effect; repeating it is safe.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.Canceled:
		return true
	}
	return false
}

// newKey is an idempotency key for one call whose caller gave none.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "go-client-" + hex.EncodeToString(b[:])
}
