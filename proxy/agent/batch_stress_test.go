package agent

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// slowBatch accepts every result of a batch after a short random delay.
type slowBatch struct{ completeOnly }

func (slowBatch) CompleteBatch(ctx context.Context, in *automatorv1.CompleteBatchRequest, _ ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error) {
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
	resp := &automatorv1.CompleteBatchResponse{}
	for range in.GetResults() {
		resp.Outcomes = append(resp.Outcomes, &automatorv1.CompleteOutcome{})
	}
	return resp, nil
}

// TestManyPostsWithCallersGivingUpAllEnd: 4,000 results posted at once,
// every seventh caller giving up at a random moment, against an automator
// that takes a random time per call: every post returns, and the poster is
// left idle with nothing queued (no result stuck, no lost turn to send).
func TestManyPostsWithCallersGivingUpAllEnd(t *testing.T) {
	t.Parallel()
	p := newPoster(slowBatch{}, nil, tuning{})
	var wg sync.WaitGroup
	for i := range 4000 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%7 == 0 {
				go func() { time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond); cancel() }()
			}
			err := p.complete(ctx, &automatorv1.CompleteRequest{WorkId: "w"})
			if err != nil && ctx.Err() == nil {
				t.Errorf("post %d: %v", i, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("posts still waiting after a minute")
	}
	if !p.group.Idle() {
		t.Fatalf("after every post returned: a post on its way or %d results queued; want idle and empty", p.group.Waiting())
	}
}
