package grpcwire

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/stats"
)

// AnswerStarts is a client stats handler (grpc.WithStatsHandler) that
// tells a call bounded by BeginWithin when its answer begins to arrive:
// its headers come, ahead of its message, which over a thin link may take
// minutes more to arrive whole. It also notes when the call was sent on a
// connection (Sent).
type AnswerStarts struct{}

// ErrNoAnswer is the cause of a call's context that BeginWithin ended
// because the call's answer did not begin in time.
var ErrNoAnswer = errors.New("the answer did not begin in time")

type answerKey struct{}

// sentKey is the key of a call's *atomic.Bool that AnswerStarts sets when
// the call's headers are sent (BeginWithin).
type sentKey struct{}

// BeginWithin bounds a call made with the returned context: its answer
// must begin to arrive within begin (AnswerStarts), or the context ends
// with the cause ErrNoAnswer; once begun, it has until begin plus whole
// (the time its largest message takes on the slowest link it is to
// cross) to arrive whole. A peer that hangs on a live connection is given
// up after begin, but a large answer on its way is not cut off.
func BeginWithin(ctx context.Context, begin, whole time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, begin+whole)
	ctx, stop := context.WithCancelCause(ctx)
	ctx = context.WithValue(ctx, sentKey{}, new(atomic.Bool))
	late := time.AfterFunc(begin, func() { stop(ErrNoAnswer) })
	ctx = WhenAnswerStarts(ctx, func() { late.Stop() })
	return ctx, func() {
		late.Stop()
		stop(nil)
		cancel()
	}
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
// produced nothing (a web proxy's host name that does not resolve).
func Sent(ctx context.Context) bool {
	b, ok := ctx.Value(sentKey{}).(*atomic.Bool)
	return ok && b.Load()
}

func (AnswerStarts) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (AnswerStarts) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch h := s.(type) {
	case *stats.InHeader:
		if h.IsClient() {
			AnswerStarted(ctx)
		}
	case *stats.OutHeader:
		if b, ok := ctx.Value(sentKey{}).(*atomic.Bool); ok && h.IsClient() {
			b.Store(true)
		}
	}
}

func (AnswerStarts) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (AnswerStarts) HandleConn(context.Context, stats.ConnStats) {}
