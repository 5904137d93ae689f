package grpcwire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// AnswerStarts is a client stats handler (grpc.WithStatsHandler) that
// tells a call bounded by BeginWithin when its answer begins to arrive:
// its headers come, ahead of its message, which over a thin link may take
// minutes more to arrive whole. It also notes when the call was sent on a
// connection (Sent). WatchAnswers gives it with what Unsent needs.
type AnswerStarts struct{}

// WatchAnswers are the dial options of a client whose calls are bounded by
// BeginWithin: AnswerStarts, and an interceptor that notes each unary
// call made through it, so that Unsent knows the call was watched (a
// stats handler sees a call only once its channel's name has resolved).
func WatchAnswers() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStatsHandler(AnswerStarts{}),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if m, ok := ctx.Value(sentKey{}).(*callMarks); ok {
				m.watched.Store(true)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
	}
}

// ErrNoAnswer is the cause of a call's context that BeginWithin ended
// because the call's answer did not begin in time.
var ErrNoAnswer = errors.New("the answer did not begin in time")

// ErrNoAnswerOnceQuiet is the cause, wrapping ErrNoAnswer, when
// BeginWithinUnlessHeard ended the call past its bound because its
// connection, busy until then, had delivered nothing for Quiet.
var ErrNoAnswerOnceQuiet = fmt.Errorf("%w: its connection delivered nothing for %v", ErrNoAnswer, Quiet)

type answerKey struct{}

// sentKey is the key of a call's *callMarks (BeginWithin).
type sentKey struct{}

// callMarks is what WatchAnswers notes of a call bounded by BeginWithin:
// watched once the call went through its interceptor, sent once its
// headers were given to a connection (AnswerStarts, OutHeader).
type callMarks struct {
	watched, sent atomic.Bool
}

// BeginWithin bounds a call made with the returned context: its answer
// must begin to arrive within begin (AnswerStarts), or the context ends
// with the cause ErrNoAnswer; once begun, it has until begin plus whole
// (the time its largest message takes on the slowest link it is to
// cross) to arrive whole. A peer that hangs on a live connection is given
// up after begin, but a large answer on its way is not cut off.
func BeginWithin(ctx context.Context, begin, whole time.Duration) (context.Context, context.CancelFunc) {
	return BeginWithinUnlessHeard(ctx, begin, whole, nil)
}

// Quiet is how long a call's connection must have delivered nothing for
// the call, past its bound for its answer to begin, to be given up
// (BeginWithinUnlessHeard).
const Quiet = time.Second

// BeginWithinUnlessHeard is BeginWithin for a call over a connection
// whose last delivery heard tells (the zero time when nothing came yet;
// nil: not known): past begin, a call whose answer has not begun is given
// up only once its connection has delivered nothing for Quiet. Over a
// thin link an answer may have to wait behind what the peer sent before
// it (another call's large answer, or what it had sent of the answer to a
// try given up before it): the link is busy, not the peer hung, and a try
// given up for that would only add its own answer to what the next try
// waits behind. The time its answer took to begin is taken from whole.
func BeginWithinUnlessHeard(ctx context.Context, begin, whole time.Duration, heard func() time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, begin+whole)
	ctx, stop := context.WithCancelCause(ctx)
	ctx = context.WithValue(ctx, sentKey{}, new(callMarks))
	b := &beginTimer{heard: heard, stop: stop}
	b.mu.Lock()
	b.due = time.Now().Add(begin)
	b.t = time.AfterFunc(begin, b.fire)
	b.mu.Unlock()
	ctx = WhenAnswerStarts(ctx, b.settle)
	return ctx, func() {
		b.settle()
		stop(nil)
		cancel()
	}
}

// lateFire is how late past its time a timer that fires tells that this
// process, or its host, was stopped meanwhile (SIGSTOP, a frozen virtual
// machine): its timers then all fire at once when it resumes, before the
// goroutines that read what came meanwhile have run.
const lateFire = time.Second

// beginTimer ends a call whose answer did not begin in time
// (BeginWithinUnlessHeard).
type beginTimer struct {
	heard func() time.Time
	stop  context.CancelCauseFunc

	mu  sync.Mutex
	t   *time.Timer
	due time.Time // when t was set to fire
	// resumed is set once t fired lateFire or more past due: it was set
	// again, once, for Quiet, so that an answer that came while the
	// process was stopped is read rather than given up (a review: a
	// proxy paused 48 s blamed the automator as it resumed, and its poll
	// was tried again).
	resumed bool
	// settled is set once the answer began or the call ended: the timer
	// is not set again.
	settled bool
	// busy is set once the bound passed while the connection delivered.
	busy bool
}

func (b *beginTimer) fire() {
	b.mu.Lock()
	if b.settled {
		b.mu.Unlock()
		return
	}
	if now := time.Now(); !b.resumed && now.Sub(b.due) >= lateFire {
		b.resumed = true
		b.due = now.Add(Quiet)
		b.t.Reset(Quiet)
		b.mu.Unlock()
		return
	}
	cause := ErrNoAnswer
	if b.heard != nil {
		if wait := time.Until(b.heard().Add(Quiet)); wait > 0 {
			b.due = time.Now().Add(wait)
			b.t.Reset(wait)
			b.busy = true
			b.mu.Unlock()
			return
		}
	}
	if b.busy {
		cause = ErrNoAnswerOnceQuiet
	}
	b.mu.Unlock()
	b.stop(cause)
}

func (b *beginTimer) settle() {
	b.mu.Lock()
	b.settled = true
	b.t.Stop()
	b.mu.Unlock()
}

// WhenAnswerStarts returns a context for a call that calls f when
// AnswerStarted is called with it.
func WhenAnswerStarts(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, answerKey{}, f)
}

// AnswerStarted tells the call whose context is ctx (BeginWithin,
// WhenAnswerStarts) that its answer began to arrive; on any other call's
// context it does nothing. AnswerStarts calls it.
func AnswerStarted(ctx context.Context) {
	if f, ok := ctx.Value(answerKey{}).(func()); ok {
		f()
	}
}

// Sent reports whether the call made with ctx (BeginWithin's) was sent:
// its headers given to a connection. A call that ended unsent never had
// one to go on: gRPC fails a call whose connection could not be set up,
// but waits for one without end while the channel's name resolution has
// produced nothing (a web proxy's host name that does not resolve). A
// call made without AnswerStarts is never known to be sent (Unsent).
func Sent(ctx context.Context) bool {
	m, ok := ctx.Value(sentKey{}).(*callMarks)
	return ok && m.sent.Load()
}

// Unsent reports whether the call made with ctx (BeginWithin's) is known
// to have reached no server: it was made through WatchAnswers and never
// given to a connection (none could be set up, or its channel's name
// resolved to nothing). A call given to a connection may have reached the
// server even when it then failed; and one made without WatchAnswers (a
// client that does not use them) is not known either way.
func Unsent(ctx context.Context) bool {
	m, ok := ctx.Value(sentKey{}).(*callMarks)
	return ok && m.watched.Load() && !m.sent.Load()
}

func (AnswerStarts) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (AnswerStarts) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch h := s.(type) {
	case *stats.InHeader:
		if h.IsClient() {
			AnswerStarted(ctx)
		}
	case *stats.OutHeader:
		if m, ok := ctx.Value(sentKey{}).(*callMarks); ok && h.IsClient() {
			m.sent.Store(true)
		}
	}
}

func (AnswerStarts) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (AnswerStarts) HandleConn(context.Context, stats.ConnStats) {}
