package agent

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/stats"
)

// SendTimes is a gRPC stats handler for the connection the agent polls
// over (grpc.WithStatsHandler): it tells each poll when its request was
// written to a connection, after any wait for one to be set up (the TCP,
// TLS and HTTP/2 handshakes of a new connection, over a slow link
// seconds), from which its claims' time counts (claimedAt). Counted from
// before that wait, a claim cut its script short by it (a re-review: 7.5 s
// of 11.5 s over a link of 1.5 s each way). Calls that ask nothing of it
// cost a context lookup.
func SendTimes() stats.Handler { return sendTimes{} }

type sendTimes struct{}

// sentKey is the context key of a call's sentRecord.
type sentKey struct{}

// sentRecord is when a call's request was last written to a connection.
type sentRecord struct {
	mu sync.Mutex
	at time.Time
}

// recordSent returns ctx carrying a record of when a call made with it
// writes its request (SendTimes), and a function that reads it: the time
// written, or if none was recorded (a connection without SendTimes), or
// one before, then before.
func recordSent(ctx context.Context) (context.Context, func(before time.Time) time.Time) {
	r := &sentRecord{}
	return context.WithValue(ctx, sentKey{}, r), func(before time.Time) time.Time {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.at.After(before) {
			return r.at
		}
		return before
	}
}

func (sendTimes) HandleRPC(ctx context.Context, s stats.RPCStats) {
	p, ok := s.(*stats.OutPayload)
	if !ok || !p.IsClient() {
		return
	}
	if r, ok := ctx.Value(sentKey{}).(*sentRecord); ok {
		r.mu.Lock()
		r.at = p.SentTime // the latest attempt's
		r.mu.Unlock()
	}
}

func (sendTimes) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (sendTimes) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (sendTimes) HandleConn(context.Context, stats.ConnStats)                       {}
