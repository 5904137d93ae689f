package cli

import (
	"context"

	"google.golang.org/grpc/stats"

	"github.com/opsgate/opsgate/proxy/agent"
)

// answerStarts tells a poll when its answer begins to arrive (its headers
// come, ahead of its message), so that an answer carrying large commands
// over a thin downlink is given the time it takes (agent.AnswerStarted).
type answerStarts struct{}

func (answerStarts) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (answerStarts) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok && h.IsClient() {
		agent.AnswerStarted(ctx)
	}
}

func (answerStarts) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (answerStarts) HandleConn(context.Context, stats.ConnStats) {}
