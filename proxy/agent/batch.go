package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/internal/batch"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// Results posted together.
//
// A result is posted at once when no post is on its way. Results that finish
// while one is on its way wait for it, then go together in one CompleteBatch
// call, sent by the oldest of their callers: under load the batches grow by
// themselves, and a lone result costs nothing more than a Complete. Each
// result still gets its own answer (the automator records each as a
// Complete of its own), so deliver's retries and refusals are per result as
// before.
//
// A result larger than postAlonePast is posted with a Complete of its own,
// at once, outside the batches: on a thin uplink it takes a minute or more
// to send, and results that finish meanwhile must not wait for it (nor
// time out behind it, nor be sent again with it each time it is retried).
// HTTP/2 interleaves the calls on the connection.
//
// Every call posting more than postAlonePast bytes (a large result, or a
// batch that large) goes to the uploads client, the other connection when
// the agent has one (Options.Uploads): on the connection that polls, a
// large upload would queue the keepalive's ping behind what gRPC and the
// kernel hold of it.

// BatchClient is implemented by a Client that can post several results in
// one call (the generated client does). Without it, each result is posted
// with Complete.
type BatchClient interface {
	CompleteBatch(ctx context.Context, in *automatorv1.CompleteBatchRequest, opts ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error)
}

const (
	// maxPostBatch is the most results one call carries (the automator's
	// bound).
	maxPostBatch = 256
	// maxPostBatchBytes bounds a batch's encoded results, well within the
	// automator's 8 MiB per message.
	maxPostBatchBytes = 4 << 20
	// postAlonePast: a result larger than this is posted alone, outside
	// the batches (a second on a 512 kbit/s uplink).
	postAlonePast = 64 << 10
	// batchRetryAfter is how long results go one by one after the automator
	// answered that it has no CompleteBatch (an older version), before a
	// batch is tried again (it may have been upgraded).
	batchRetryAfter = 10 * time.Minute
)

// errNoBatch tells a result's caller to post it alone with Complete.
var errNoBatch = errors.New("the automator has no CompleteBatch")

// poster posts the results of one agent.
type poster struct {
	client Client
	batch  BatchClient // nil: Complete only
	// uploads and uploadBatch post more than postAlonePast bytes at once.
	uploads     Client
	uploadBatch BatchClient

	// group sends the batches (post), one call at a time, each on the
	// goroutine of its oldest result's caller. A result whose caller gives
	// up while it waits is not sent; a caller that gives up once its result
	// is on its way returns at once (Detach), like a Complete cut off after
	// it was sent: the result may or may not be recorded, and deliver keeps
	// it in the spool.
	group batch.Group[*postOp]
	// noBatchUntil: the time since born (sinceBorn) until which results go
	// one by one: on the monotonic clock, which a step of the wall clock
	// leaves alone (stored as unix nanoseconds, a step back of the wall
	// clock kept batching off that much longer).
	noBatchUntil atomic.Int64
	born         time.Time
	tune         tuning // its postBound bounds each call
}

// sinceBorn is the time since the poster was made, in nanoseconds, on the
// monotonic clock.
func (p *poster) sinceBorn() int64 { return int64(time.Since(p.born)) }

type postOp struct {
	ctx  context.Context
	req  *automatorv1.CompleteRequest
	size int // encoded
	// deadline is the unit's, when known: no call carries the result past
	// it (the automator would refuse it, and guarantee 7 says nothing is
	// reported after it).
	deadline time.Time
}

// newPoster posts with c, and with uploads, when not nil, what is larger
// than postAlonePast, each call within tune's postBound.
func newPoster(c, uploads Client, tune tuning) *poster {
	p := &poster{client: c, uploads: c, born: time.Now(), tune: tune.withDefaults()}
	p.batch, _ = c.(BatchClient)
	p.uploadBatch = p.batch
	if uploads != nil {
		p.uploads = uploads
		p.uploadBatch, _ = uploads.(BatchClient)
		if p.uploadBatch == nil {
			p.uploadBatch = p.batch
		}
	}
	p.group = batch.Group[*postOp]{
		Run:      p.post,
		MaxItems: maxPostBatch,
		Size:     func(o *postOp) int { return o.size },
		MaxSize:  maxPostBatchBytes,
		Detach:   true,
	}
	return p
}

// complete posts req and returns its answer, as Complete would.
func (p *poster) complete(ctx context.Context, req *automatorv1.CompleteRequest) error {
	return p.completeWaiting(ctx, req, time.Time{}, false)
}

// completeWaiting is complete, for a unit whose deadline is deadline (zero:
// not known); with waitReady, a call made while there is no connection
// waits for one within ctx (grpc.WaitForReady) instead of failing at once
// with the last error of the connection's dial: a retry then goes out as
// soon as the link is back, not at the end of its backoff. Such a call
// goes alone, within its own ctx: in a batch it would wait as long as the
// batch's call, the longest of its results' bounds, and go out past its
// own deadline once the link is back (a review).
func (p *poster) completeWaiting(ctx context.Context, req *automatorv1.CompleteRequest, deadline time.Time, waitReady bool) error {
	size := proto.Size(req)
	if p.batch != nil && !waitReady && size <= postAlonePast && p.sinceBorn() >= p.noBatchUntil.Load() {
		err := p.group.Do(ctx, &postOp{ctx: ctx, req: req, size: size, deadline: deadline})
		if !errors.Is(err, errNoBatch) {
			return err
		}
	}
	client := p.client
	if size > postAlonePast {
		client = p.uploads
	}
	_, err := client.Complete(ctx, req, grpc.WaitForReady(waitReady))
	return err
}

// post makes one call for batch and returns the answer of each of its
// results. The call ends when every result's caller has given up (the proxy
// stops, or its attempt's bound passed), and in any case after postBound of
// its size or the latest of its results' bounds, whichever is later (an
// attempt after one that ran out of time is given longer: deliver). A
// result whose unit's deadline comes before that end is posted alone,
// beside the call, within its own bound: the call must not carry it past
// its deadline, nor be cut off at it with the other results (a review:
// ended at the earliest deadline, it failed the others, and in a stop
// lost them).
func (p *poster) post(all []*postOp) []error {
	errs := make([]error, len(all))
	if p.sinceBorn() < p.noBatchUntil.Load() {
		// They waited for the call that found out: each goes alone.
		for i := range errs {
			errs[i] = errNoBatch
		}
		return errs
	}
	// Without some results the batch's end is no later: those kept have
	// deadlines past it.
	batch := make([]*postOp, 0, len(all))
	callEnd := p.callEnd(all)
	var alone sync.WaitGroup
	defer alone.Wait()
	for i, o := range all {
		if !o.deadline.IsZero() && o.deadline.Before(callEnd) {
			alone.Go(func() { _, errs[i] = p.client.Complete(o.ctx, o.req) })
			continue
		}
		batch = append(batch, o)
	}
	if len(batch) == 0 {
		return errs
	}
	size := 0
	for _, o := range batch {
		size += o.size
	}
	ctx, cancel := context.WithDeadline(context.Background(), p.callEnd(batch))
	defer cancel()
	var waiting atomic.Int32
	waiting.Store(int32(len(batch)))
	for _, o := range batch {
		stop := context.AfterFunc(o.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	req := &automatorv1.CompleteBatchRequest{Results: make([]*automatorv1.CompleteRequest, len(batch))}
	for i, o := range batch {
		req.Results[i] = o.req
	}
	client := p.batch
	if size > postAlonePast {
		client = p.uploadBatch
	}
	resp, err := client.CompleteBatch(ctx, req)
	switch {
	case status.Code(err) == codes.Unimplemented:
		p.noBatchUntil.Store(p.sinceBorn() + int64(batchRetryAfter))
		err = errNoBatch
	case err == nil && len(resp.GetOutcomes()) != len(batch):
		err = status.Errorf(codes.Internal, "the automator answered %d outcomes for %d results", len(resp.GetOutcomes()), len(batch))
	}
	j := 0 // batch[j] is the next result the call carried
	for i, o := range all {
		if j == len(batch) || o != batch[j] {
			continue // posted alone
		}
		errs[i] = err
		if err == nil {
			if out := resp.GetOutcomes()[j]; out.GetCode() != int32(codes.OK) {
				errs[i] = status.Error(codes.Code(out.GetCode()), out.GetMessage())
			}
		}
		j++
	}
	return errs
}

// callEnd is when a call posting batch ends at the latest: postBound of its
// size from now, or the latest of its results' bounds.
func (p *poster) callEnd(batch []*postOp) time.Time {
	size := 0
	for _, o := range batch {
		size += o.size
	}
	end := time.Now().Add(p.tune.postBound(size))
	for _, o := range batch {
		if d, ok := o.ctx.Deadline(); ok && d.After(end) {
			end = d
		}
	}
	return end
}
